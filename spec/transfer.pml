/*
 * Bulkhead KV transfer protocol: a Promela model for SPIN.
 *
 * What it models (docs/formal-model.md says it in prose, with what is left out):
 *   - a router per request (client side: admission, reserve, prefill, cancel),
 *     one prefill (P) and one decode (D) server;
 *   - a KV page pool on each side: pages carry an owner (transfer ID), a generation,
 *     a lease state and an in-flight write (D: the write of a received DATA frame into
 *     the page; P: the forward pass writing the prompt's KV);
 *   - a network that loses, duplicates and reorders messages and corrupts DATA
 *     payloads, within a fault budget (FAULTS) shared with crashes;
 *   - crashes of P and D: a crash wipes the process's protocol state (transfer table,
 *     seen IDs, windows); the page pool outlives it, in-flight writes still land, and
 *     the crashed incarnation's pages come back only through lease expiry;
 *   - time: leases expire, the router's deadline passes and retransmission timers fire
 *     on SPIN's `timeout` (nothing else can move); a lease that expires early, while
 *     frames for it are still in the network, is a timing fault from the same budget;
 *   - client cancel in any phase, prefill admission rejection (pool full or prompt
 *     over prefill's limit), decode refusal (no room, duplicate ID) and over-length
 *     prompts (n > the pair's effective limit).
 *
 * Negative controls, compiled from this same file:
 *   -DPLACEHOLDER    admission swaps an over-length prompt for a one-token placeholder
 *                    and keeps processing it (the incident in DESIGN.md section 1)
 *   -DFREE_NO_DRAIN  a released page is freed at once, even with a write in flight
 *   -DNOCOUNT        decode goes Ready on COMMIT without the count/coverage check
 *   -DABORT_200      the router answers 200 when decode reports the transfer failed
 *                    (the "abort reported as finish_reason length" fault)
 *   -DSENDER_OVERRUN prefill sends one DATA frame more than the credit window allows
 * Each must make SPIN report an error; spec/check.sh checks that they do.
 *
 * Reachability witnesses (-DREACH_LATE_FRAME, -DREACH_DRAIN, -DREACH_ORPHAN,
 * -DREACH_OUT_OF_ORDER, -DREACH_WINDOW_FULL) assert
 * that a scenario never happens, so that SPIN must find it: proof that the checks
 * above are not passing because the model cannot get there.
 */

/* ---- sizes (small on purpose: the state space grows fast) ---- */
/* Defaults give a quick run (about 0.2 M states); spec/check.sh sets them per check. */
#ifndef NREQ
#define NREQ 1          /* requests (router processes), 1 or 2; IDs 1..NREQ */
#endif
#ifdef LONG3
/* Prompts of up to 3 tokens, so that a window of 2 both pipelines and blocks. The
   pair's limits are then equal; the pools are unchanged (one request fills decode's). */
#define PLIMIT 3
#define LIMIT 3
#define PMAX 3
#else
#define PLIMIT 2        /* prefill's max input tokens */
#define LIMIT 2         /* the pair's effective limit: min(PLIMIT, DLIMIT), from the handshake */
#define PMAX 2          /* page-table slots per prefill transfer: PLIMIT */
#endif
#define DLIMIT 3        /* decode's max input tokens: the pair's limits differ */
#define MAXNEW 1        /* decode budget: one page beyond the prompt */
#define DPAGES 4        /* decode pool (pages of one token) */
#define PPAGES 3        /* prefill pool */
#define DMAX 4          /* page-table slots per decode reservation: DLIMIT + MAXNEW */
#ifndef FAULTS
#define FAULTS 2        /* losses + duplicates + reorders + corruptions + crashes, in total */
#endif
#ifndef RETRIES
#define RETRIES 1       /* retransmissions (prefill's DATA/COMMIT, router's CANCEL), in total */
#endif
#ifndef W
#define W 1             /* credit window: DATA frames unacknowledged at once */
#endif
#define QD 12           /* channel capacities; net() asserts they never limit the model */
#define QP 12
#define QR 12

/* ---- messages ---- */
mtype = {
  RESERVE,    /* R->D (id, n): reserve n + MAXNEW tokens */
  PREFILL,    /* R->P (id, n) */
  CANCEL,     /* R->D, R->P (id): acknowledged by CANCELLED */
  DATA,       /* P->D (id, tok, payload): payload = tag of the KV it carries, BAD if corrupted */
  COMMIT,     /* P->D (id, n_tokens, digest) */
  ABORT,      /* P->D, D->P (id) */
  CREDIT,     /* D->P (id, cumulative frames accepted) */
  ACK,        /* D->P (id): verified; prefill may release its pages */
  RESERVED,   /* D->R (id) */
  REFUSED,    /* D->R (id): no room, over decode's limit, or an ID already seen */
  REJECTED,   /* P->R (id): prefill admission said no; carries the original error */
  READY,      /* D->R (id): verified, decoding */
  DONE,       /* D->R (id): generation finished */
  FAIL,       /* D->R (id): the transfer failed on decode (lease, checksum, verification) */
  CANCELLED   /* D->R, P->R (id, from) */
};

#define BAD 8           /* payload bit: checksum does not match */
#define FROM_D 1
#define FROM_P 2

chan toD = [QD] of { mtype, byte, byte, byte };
chan toP = [QP] of { mtype, byte, byte, byte };
chan toR[NREQ + 1] = [QR] of { mtype, byte, byte, byte };   /* toR[0] unused */

byte faults = FAULTS;
byte retries = RETRIES;

/* ---- page pools: outlive a crash of their process ---- */
#define FREE   0
#define LEASED 1        /* reserved for a transfer, under a lease deadline */
#define SEQ    2        /* held by a decoding sequence (lease renewed while it lives) */
#define DRAIN  3        /* lease released; freed once no write is in flight */

typedef Page {
  byte st;              /* FREE, LEASED, SEQ, DRAIN */
  byte owner;           /* transfer ID the page is leased to (0: none) */
  byte gen;             /* generation: the pool's allocation serial, new on every reuse */
  bit  wip;             /* a write is in flight into this page */
  byte wsrc;            /* ...carrying the KV of this request (tag) */
  byte wgen;            /* ...issued for this generation */
  byte data;            /* whose KV the page holds (0: scrubbed) */
  byte dgen;            /* generation the landed write was issued for */
};
Page dp[DPAGES];
Page pp[PPAGES];
byte dused, pused;      /* pages not FREE, per pool */
byte dserial, pserial;  /* generation counters */

/* ---- decode: volatile protocol state (lost on crash) ---- */
#define D_NONE 0        /* never seen this ID */
#define D_RECV 1        /* reserved, receiving */
#define D_DEC  2        /* verified, decoding */
#define D_GONE 3        /* finished, failed, cancelled or refused: a tombstone */
byte ds[NREQ + 1];
byte dn[NREQ + 1];      /* reserved prompt tokens */
byte dgn[NREQ + 1];     /* generation of the reservation's pages */
byte dcov[NREQ + 1];    /* coverage bitmap: tokens accepted */
byte dpend[NREQ + 1];   /* accepted writes not yet landed */
bit  dcommit[NREQ + 1]; /* COMMIT received */
byte dctok[NREQ + 1];   /* COMMIT's n_tokens */
byte ddig[NREQ + 1];    /* COMMIT's digest */
byte dpg[(NREQ + 1) * DMAX];   /* page table: token k -> page */

/* ---- prefill: volatile protocol state (lost on crash) ---- */
#define P_NONE 0
#define P_COMP 1        /* admitted, computing KV */
#define P_SEND 2        /* streaming DATA */
#define P_WAIT 3        /* COMMIT sent, pages held until ACK (deferred release) */
#define P_GONE 4        /* tombstone */
byte ps[NREQ + 1];
byte pn[NREQ + 1];
byte pgn[NREQ + 1];
byte psent[NREQ + 1];
byte pcred[NREQ + 1];
byte ppg[(NREQ + 1) * PMAX];

/* ---- ghosts: the client's view, for the properties only ---- */
#define ST_NONE    0
#define ST_200     1    /* success with content */
#define ST_400     2    /* context_length_exceeded at admission */
#define ST_REFUSED 3    /* decode had no room: 429/503 */
#define ST_PREJ    4    /* prefill's original admission error */
#define ST_5XX     5    /* transfer or integrity failure */
#define ST_GONE    6    /* client hung up (or router deadline): no response */
byte cn[NREQ + 1];      /* prompt length the client sent */
byte cst[NREQ + 1];     /* what the client got */
bit  admitted[NREQ + 1];
bit  rend[NREQ + 1];    /* router finished with the request */
bit  ddone[NREQ + 1];   /* decode finished generating for this ID after a verified start */
bit  dcrashed;          /* decode has crashed at least once (property (f) is checked until then) */

#define FULL(n) ((1 << (n)) - 1)
#define LIVE_P(x) (ps[x] == P_COMP || ps[x] == P_SEND || ps[x] == P_WAIT)

/*
 * Send over the faulty network. The assertion keeps channel capacity from ever
 * being what blocks the model (it would hide behaviours, or deadlock it).
 */
inline net(ch, cap, m, a, b, c) {
  assert(len(ch) + 2 <= cap);
  if
  :: ch!m, a, b, c
  :: faults > 0 -> faults--                               /* lost */
  :: faults > 0 -> faults--; ch!m, a, b, c; ch!m, a, b, c /* duplicated */
  fi
}

/* The two servers, one file each (cpp resolves these next to this file). */
#include "decode.pml"
#include "prefill.pml"

/* ================= router (one per request, with its client) ================= */

#define R_RESERVING  1
#define R_PREFILLING 2
#define R_STREAMING  3
#define R_CANCELLING 4
#define R_FIN        5

/*
 * (e) A request that met no fault, no refusal and no cancel succeeded: the protocol
 * never stalls into its deadline or fails by itself.
 */
inline r_fin() {
  phase = R_FIN;
  rend[id] = 1;
  assert(cst[id] == ST_200 || excused || faults < FAULTS)
}
inline r_cancel_d() { needD = 1; net(toD, QD, CANCEL, id, 0, 0) }
inline r_cancel_p() { needP = 1; net(toP, QP, CANCEL, id, 0, 0) }
#define R_ACTIVE (phase == R_RESERVING || phase == R_PREFILLING || phase == R_STREAMING)

proctype Router(byte id) {
  mtype m; byte x, y, z, n, phase, plan; bit needD, needP, excused;

#ifdef SEQREQ
  (id == 1 || rend[id - 1]);   /* the next request arrives when this router is done with the last */
#endif
  if
  :: n = 1
  :: n = LIMIT
  :: n = LIMIT + 1                 /* over-length */
  fi;
  cn[id] = n;
  if
  :: n > LIMIT ->
#ifdef PLACEHOLDER
     n = 1                          /* "rejected", then swapped for a one-token placeholder */
#else
     cst[id] = ST_400;              /* 400 context_length_exceeded: nothing reserved or sent */
     goto fin
#endif
  :: else -> skip
  fi;
  /* Will the client hang up, and in which phase? (Decided up front so that weak
     fairness cannot force a hang-up on a request that is merely stuck.) */
  if
  :: plan = 0
  :: plan = R_RESERVING; excused = 1
  :: plan = R_PREFILLING; excused = 1
  :: plan = R_STREAMING; excused = 1
  fi;
  atomic {
    admitted[id] = 1;
    phase = R_RESERVING;
    net(toD, QD, RESERVE, id, n, 0)
  };
  do
  :: atomic { toR[id]?m, x, y, z ->
       if
       :: phase == R_RESERVING && m == RESERVED ->
          net(toP, QP, PREFILL, id, n, 0); phase = R_PREFILLING
       :: phase == R_RESERVING && m == REFUSED ->
          cst[id] = ST_REFUSED; excused = 1; r_fin()
       :: phase == R_RESERVING && m == FAIL ->   /* overtook RESERVED; decode already released */
          cst[id] = ST_5XX; r_fin()
       :: phase == R_PREFILLING && m == REJECTED ->
          cst[id] = ST_PREJ; excused = 1; r_cancel_d(); phase = R_CANCELLING
       :: phase == R_PREFILLING && m == READY -> phase = R_STREAMING
       :: (phase == R_PREFILLING || phase == R_STREAMING) && m == FAIL ->
#ifdef ABORT_200
          cst[id] = ST_200;                  /* the bug: reported as finish_reason "length" */
          assert(ddone[id]);                 /* (d) */
          r_fin()
#else
          cst[id] = ST_5XX; r_cancel_p(); phase = R_CANCELLING
#endif
       :: (phase == R_PREFILLING || phase == R_STREAMING) && m == DONE ->  /* READY may be lost */
          assert(ddone[id]);                 /* (d) a 200 only comes from Done */
          cst[id] = ST_200; r_fin()
       :: phase == R_CANCELLING && m == CANCELLED ->
          if
          :: y == FROM_D -> needD = 0
          :: else -> needP = 0
          fi;
          if
          :: !needD && !needP -> r_fin()
          :: else -> skip
          fi
       :: else -> skip                       /* stale or duplicate reply */
       fi;
       m = 0; x = 0; y = 0; z = 0 }
  :: atomic { (phase == plan || (timeout && R_ACTIVE)) && R_ACTIVE ->
       /* the client hangs up (cst: no response), or the router's deadline passes
          (cst: 504); either way an explicit, acknowledged cancel to both legs */
       if
       :: phase == plan -> cst[id] = ST_GONE
       :: else -> cst[id] = ST_5XX
       fi;
       r_cancel_d();
       if
       :: phase != R_RESERVING -> r_cancel_p()
       :: else -> skip
       fi;
       phase = R_CANCELLING }
  :: atomic { timeout && phase == R_CANCELLING && retries > 0 ->   /* cancel not acked yet */
       retries--;
       if :: needD -> net(toD, QD, CANCEL, id, 0, 0) :: else -> skip fi;
       if :: needP -> net(toP, QP, CANCEL, id, 0, 0) :: else -> skip fi }
  :: atomic { timeout && phase == R_CANCELLING -> r_fin() }   /* give up; the leases reclaim */
  :: phase == R_FIN -> break
  od;
fin:
  /* Done with this request. Forget its details, which only multiply states from here. */
  atomic {
    rend[id] = 1;                   /* (already set, except on the 400 path) */
    cst[id] = ST_NONE; n = 0; phase = 0; plan = 0; needD = 0; needP = 0; excused = 0
  };
end_r:
  do
  :: toR[id]?m, x, y, z -> m = 0; x = 0; y = 0; z = 0   /* late replies are read and dropped */
  od
}

init {
  atomic {
    run Decode();
    run Prefill();
    run Router(1);
#if NREQ > 1
    run Router(2)
#endif
  }
}

/*
 * ---- liveness: checked with acceptance cycles under weak fairness (pan -a -f).
 * The fault and retry budgets are finite, so every run eventually stops losing
 * messages; leases and the router's deadline act on timeout (nothing else can move).
 * `live` is the conjunction that spec/check.sh runs; the parts are there to run alone.
 */
ltl live {
  [] ((admitted[1] -> <> rend[1]) && (admitted[NREQ] -> <> rend[NREQ]) &&
      ((dused > 0 || pused > 0) -> <> (dused == 0 && pused == 0)))
}
ltl req_ends {
  [] ((admitted[1] -> <> rend[1]) && (admitted[NREQ] -> <> rend[NREQ]))
}
ltl pages_freed {
  [] ((dused > 0 || pused > 0) -> <> (dused == 0 && pused == 0))
}
