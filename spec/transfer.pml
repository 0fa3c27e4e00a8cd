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
 * Each must make SPIN report an error; spec/check.sh checks that they do.
 *
 * Reachability witnesses (-DREACH_LATE_FRAME, -DREACH_DRAIN, -DREACH_ORPHAN) assert
 * that a scenario never happens, so that SPIN must find it: proof that the checks
 * above are not passing because the model cannot get there.
 */

/* ---- sizes (small on purpose: the state space grows fast) ---- */
/* Defaults give a quick run (about 0.2 M states); spec/check.sh sets them per check. */
#ifndef NREQ
#define NREQ 1          /* requests (router processes), 1 or 2; IDs 1..NREQ */
#endif
#define PLIMIT 2        /* prefill's max input tokens */
#define DLIMIT 3        /* decode's max input tokens: the pair's limits differ */
#define LIMIT 2         /* the pair's effective limit: min(PLIMIT, DLIMIT), from the handshake */
#define MAXNEW 1        /* decode budget: one page beyond the prompt */
#define DPAGES 4        /* decode pool (pages of one token) */
#define PPAGES 3        /* prefill pool */
#define DMAX 4          /* page-table slots per decode reservation: DLIMIT + MAXNEW */
#define PMAX 2          /* page-table slots per prefill transfer: PLIMIT */
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
  CREDIT,     /* D->P (id, cumulative frames landed) */
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

/* ================= decode ================= */

/* Free a page: (b) only once its lease is released and no write is in flight. Scrub it. */
inline d_free(q) {
  assert(dp[q].st == DRAIN);
  assert(dp[q].wip == 0);
  dp[q].st = FREE; dp[q].owner = 0; dp[q].data = 0; dp[q].dgen = 0;
  dused--
}

inline d_release(q) {
  dp[q].st = DRAIN;
#ifdef FREE_NO_DRAIN
  d_free(q)             /* the bug: no wait for the write in flight, which lands later */
#else
  if
  :: dp[q].wip == 0 -> d_free(q)
  :: else -> skip       /* freed when the write lands */
  fi
#endif
}

/* Release the lease on every page of one generation (one reservation). */
inline d_release_gen(g0) {
  k = 0;
  do
  :: k < DPAGES ->
     if
     :: (dp[k].st == LEASED || dp[k].st == SEQ) && dp[k].gen == g0 -> d_release(k)
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

inline d_clear(x0) {
  dn[x0] = 0; dgn[x0] = 0; dcov[x0] = 0; dpend[x0] = 0;
  dcommit[x0] = 0; dctok[x0] = 0; ddig[x0] = 0;
  f = 0;
  do
  :: f < DMAX -> dpg[x0 * DMAX + f] = 0; f++
  :: else -> break
  od
}

/* Any failure on decode: release, tell prefill and the router. */
inline d_abort(x0) {
  d_release_gen(dgn[x0]);
  d_clear(x0);
  ds[x0] = D_GONE;
  net(toP, QP, ABORT, x0, 0, 0);
  net(toR[x0], QR, FAIL, x0, 0, 0)
}

/* Cumulative credit: tokens 0.. accepted and landed, in order. */
inline d_credit(x0) {
  k = 0;
  do
  :: k < dn[x0] && ((dcov[x0] >> k) & 1) && dp[dpg[x0 * DMAX + k]].wip == 0 -> k++
  :: else -> break
  od;
  net(toP, QP, CREDIT, x0, k, 0)
}

/* (a): a page read by decode holds this request's KV, written in this generation. */
inline d_read(x0) {
  k = 0;
  do
  :: k < dn[x0] ->
     p = dpg[x0 * DMAX + k];
     assert(dp[p].owner == x0 && dp[p].gen == dgn[x0] &&
            dp[p].data == x0 && dp[p].dgen == dgn[x0]);
     k++
  :: else -> break
  od
}

/*
 * Verification before the sequence may decode. The digest check in the model looks
 * at the content of the tokens received; completeness is the count/coverage
 * check's job (the READY_TO_VERIFY guard and d_commit), which NOCOUNT removes.
 */
inline d_verify(x0) {
  f = 1; k = 0;
  do
  :: k < dn[x0] ->
     p = dpg[x0 * DMAX + k];
     if
     :: ((dcov[x0] >> k) & 1) &&
        (dp[p].data != ddig[x0] || dp[p].dgen != dgn[x0] || ddig[x0] != x0) -> f = 0
     :: else -> skip
     fi;
     k++
  :: else -> break
  od;
  if
  :: f == 0 -> d_abort(x0)                         /* digest mismatch */
  :: else ->
     /* (c) decode starts only with the full count: the client's prompt, every token */
     assert(dn[x0] == cn[x0] && dcov[x0] == FULL(cn[x0]));
     d_read(x0);                                   /* (a) */
     k = 0;
     do
     :: k < DPAGES -> if :: dp[k].st == LEASED && dp[k].gen == dgn[x0] -> dp[k].st = SEQ :: else -> skip fi; k++
     :: else -> break
     od;
     ds[x0] = D_DEC;
     net(toP, QP, ACK, x0, 0, 0);
     net(toR[x0], QR, READY, x0, 0, 0)
  fi
}

/* Decode verifies as soon as COMMIT is in and every accepted write has landed. */
#ifdef NOCOUNT
#define READY_TO_VERIFY(x) (ds[x] == D_RECV && dcommit[x] && dpend[x] == 0)
#else
#define READY_TO_VERIFY(x) (ds[x] == D_RECV && dcommit[x] && dpend[x] == 0 && dcov[x] == FULL(dn[x]))
#endif
inline d_try_verify(x0) {
  if
  :: READY_TO_VERIFY(x0) -> d_verify(x0)
  :: else -> skip
  fi
}

inline d_reserve(x0, n0) {
  if
  :: ds[x0] != D_NONE ->
     net(toR[x0], QR, REFUSED, x0, 0, 0)       /* duplicate or replayed ID */
  :: else ->
     ds[x0] = D_GONE;                          /* seen, whatever happens next */
     f = 0; k = 0;
     do
     :: k < DPAGES -> if :: dp[k].st == FREE -> f++ :: else -> skip fi; k++
     :: else -> break
     od;
     if
     :: g = 0
     :: g = 1                                  /* busy with load the model leaves out */
     fi;
     if
     :: n0 > DLIMIT || f < n0 + MAXNEW || g ->
        net(toR[x0], QR, REFUSED, x0, 0, 0)    /* never a partial reservation */
     :: else ->
        dserial++;
        f = 0; k = 0;
        do
        :: f < n0 + MAXNEW ->
           if
           :: dp[k].st == FREE ->
              assert(dp[k].wip == 0);
              dp[k].st = LEASED; dp[k].owner = x0; dp[k].gen = dserial;
              dpg[x0 * DMAX + f] = k; f++
           :: else -> skip
           fi;
           k++
        :: else -> break
        od;
        dused = dused + n0 + MAXNEW;
        ds[x0] = D_RECV; dn[x0] = n0; dgn[x0] = dserial;
        net(toR[x0], QR, RESERVED, x0, 0, 0)
     fi
  fi
}

inline d_data(x0, t0, pl) {
  if
  :: ds[x0] == D_RECV && t0 < dn[x0] ->
     if
     :: pl & BAD -> d_abort(x0)                  /* checksum mismatch */
     :: else ->
        if
        :: (dcov[x0] >> t0) & 1 -> d_credit(x0)  /* exact duplicate: ignored, credit repeated */
        :: else ->
           dcov[x0] = dcov[x0] | (1 << t0);
           p = dpg[x0 * DMAX + t0];
           assert(dp[p].st == LEASED && dp[p].owner == x0 && dp[p].wip == 0);
           dp[p].wip = 1; dp[p].wsrc = pl; dp[p].wgen = dgn[x0];
           dpend[x0]++
        fi
     fi
  :: else ->         /* no live reservation for it (unknown, finished, aborted, crashed): dropped */
#ifdef REACH_LATE_FRAME
     /* witness: a late frame for x while page 0 (every first reservation's first
        page) is leased again, to another request, in a later generation */
     assert(!(dp[0].st == LEASED && dp[0].owner != x0 && dp[0].gen > 1));
#endif
     skip
  fi
}

inline d_commit(x0, nt, dg) {
  if
  :: ds[x0] == D_RECV && !dcommit[x0] ->
#ifndef NOCOUNT
     if
     :: nt != dn[x0] -> d_abort(x0)              /* count differs from the reservation */
     :: else -> dcommit[x0] = 1; dctok[x0] = nt; ddig[x0] = dg; d_try_verify(x0)
     fi
#else
     dcommit[x0] = 1; dctok[x0] = nt; ddig[x0] = dg; d_try_verify(x0)
#endif
  :: ds[x0] == D_RECV && dcommit[x0] -> skip     /* duplicate COMMIT */
  :: ds[x0] == D_DEC -> net(toP, QP, ACK, x0, 0, 0)   /* our ACK was lost: repeat it */
  :: else -> net(toP, QP, ABORT, x0, 0, 0)       /* nothing reserved: sender must release */
  fi
}

/*
 * A write lands in page q (pool level: it lands even after a crash of decode).
 * (b) Because a page is never freed with a write in flight, the write always lands
 * in the generation it was issued for, never in the page's next life.
 */
inline d_land(q) {
  assert(dp[q].wgen == dp[q].gen);
  dp[q].data = dp[q].wsrc; dp[q].dgen = dp[q].wgen;
  dp[q].wip = 0; dp[q].wsrc = 0; dp[q].wgen = 0;
  o = dp[q].owner;
  if
  :: dp[q].st == DRAIN ->
#ifdef REACH_DRAIN
     assert(false);   /* witness: a released page waited for its write, then was freed */
#endif
     d_free(q)
  :: dp[q].st == LEASED && ds[o] == D_RECV && dgn[o] == dp[q].gen ->
     dpend[o]--;
     d_credit(o);
     d_try_verify(o)
  :: else -> skip                                 /* orphan of a crashed incarnation */
  fi
}

/* The lease on page q (and so on its whole reservation) expires. */
inline d_expire(q) {
  o = dp[q].owner; g = dp[q].gen;
  if
  :: ds[o] == D_RECV && dgn[o] == g -> d_abort(o)
  :: else ->                                      /* orphan: nobody to tell */
#ifdef REACH_ORPHAN
     assert(dp[q].st != SEQ);   /* witness: a crashed decoder's sequence reclaimed by lease */
#endif
     d_release_gen(g)
  fi
}

/* Generation runs to the end: read the KV again (a late write would show), DONE, free. */
inline d_finish(x0) {
  d_read(x0);
  ddone[x0] = 1;
  net(toR[x0], QR, DONE, x0, 0, 0);
  d_release_gen(dgn[x0]);
  d_clear(x0);
  ds[x0] = D_GONE
}

#define D_LIVESEQ(q) (ds[dp[q].owner] == D_DEC && dgn[dp[q].owner] == dp[q].gen)
#define D_EXPIRABLE(q) (dp[q].st == LEASED || (dp[q].st == SEQ && !D_LIVESEQ(q)))
#define D_ANY_EXPIRABLE (D_EXPIRABLE(0) || D_EXPIRABLE(1) || D_EXPIRABLE(2) || D_EXPIRABLE(3))
#define D_ANY_WIP (dp[0].wip || dp[1].wip || dp[2].wip || dp[3].wip)
#define D_ANY_DEC (ds[1] == D_DEC || ds[NREQ] == D_DEC)

/* Pick, nondeterministically, a page that qualifies (into q). */
inline d_pick_expirable() {
  if
  :: D_EXPIRABLE(0) -> q = 0
  :: D_EXPIRABLE(1) -> q = 1
  :: D_EXPIRABLE(2) -> q = 2
  :: D_EXPIRABLE(3) -> q = 3
  fi
}
inline d_pick_wip() {
  if
  :: dp[0].wip -> q = 0
  :: dp[1].wip -> q = 1
  :: dp[2].wip -> q = 2
  :: dp[3].wip -> q = 3
  fi
}

/* Scratch variables are zeroed at the end of every step so they never tell states apart. */
#define D_SCRUB m = 0; x = 0; y = 0; z = 0; k = 0; f = 0; p = 0; g = 0; o = 0; q = 0

proctype Decode() {
  mtype m; byte x, y, z, k, f, p, g, o, q;
end_d:
  do
  :: atomic { toD?m, x, y, z ->
       if
       :: m == RESERVE -> d_reserve(x, y)
       :: m == CANCEL ->
          if
          :: ds[x] == D_RECV || ds[x] == D_DEC -> d_release_gen(dgn[x]); d_clear(x)
          :: else -> skip
          fi;
          ds[x] = D_GONE;      /* a RESERVE arriving after its CANCEL is refused */
          net(toR[x], QR, CANCELLED, x, FROM_D, 0)
       :: m == DATA -> d_data(x, y, z)
       :: m == COMMIT -> d_commit(x, y, z)
       :: else -> skip
       fi;
       D_SCRUB }
  :: atomic { faults > 0 && len(toD) > 1 ->   /* reorder: the head overtaken by the rest */
       faults--; toD?m, x, y, z; toD!m, x, y, z; D_SCRUB }
  :: atomic { D_ANY_WIP -> d_pick_wip(); d_land(q); D_SCRUB }     /* a write lands */
  /* A lease runs out when nothing else can happen (timeout: the peer is dead or a
     message was lost), or early, while the transfer still moves: a timing fault. */
  :: atomic { timeout && D_ANY_EXPIRABLE -> d_pick_expirable(); d_expire(q); D_SCRUB }
  :: atomic { faults > 0 && D_ANY_EXPIRABLE -> faults--; d_pick_expirable(); d_expire(q); D_SCRUB }
  :: atomic { D_ANY_DEC ->                    /* a decoding sequence runs to its end */
       if
       :: ds[1] == D_DEC -> x = 1
       :: ds[NREQ] == D_DEC -> x = NREQ
       fi;
       d_finish(x); D_SCRUB }
  :: atomic { faults > 0 ->                   /* crash and restart */
       faults--;
       x = 1;
       do
       :: x <= NREQ -> d_clear(x); ds[x] = D_NONE; x++
       :: else -> break
       od;
       D_SCRUB }
  od
}

/* ================= prefill ================= */

inline p_free(q) {
  assert(pp[q].st == DRAIN);
  assert(pp[q].wip == 0);
  pp[q].st = FREE; pp[q].owner = 0; pp[q].data = 0; pp[q].dgen = 0;
  pused--
}

inline p_release(q) {
  pp[q].st = DRAIN;
#ifdef FREE_NO_DRAIN
  p_free(q)
#else
  if
  :: pp[q].wip == 0 -> p_free(q)
  :: else -> skip
  fi
#endif
}

inline p_release_gen(g0) {
  k = 0;
  do
  :: k < PPAGES ->
     if
     :: pp[k].st == LEASED && pp[k].gen == g0 -> p_release(k)
     :: else -> skip
     fi;
     k++
  :: else -> break
  od
}

inline p_clear(x0) {
  pn[x0] = 0; pgn[x0] = 0; psent[x0] = 0; pcred[x0] = 0;
  f = 0;
  do
  :: f < PMAX -> ppg[x0 * PMAX + f] = 0; f++
  :: else -> break
  od
}

inline p_stop(x0) {
  if
  :: LIVE_P(x0) -> p_release_gen(pgn[x0]); p_clear(x0)
  :: else -> skip
  fi;
  ps[x0] = P_GONE
}

inline p_prefill(x0, n0) {
  if
  :: ps[x0] != P_NONE -> skip      /* duplicate, replayed, or cancelled before it arrived */
  :: else ->
     ps[x0] = P_GONE;
     f = 0; k = 0;
     do
     :: k < PPAGES -> if :: pp[k].st == FREE -> f++ :: else -> skip fi; k++
     :: else -> break
     od;
     if
     :: g = 0
     :: g = 1                                  /* quota or load the model leaves out */
     fi;
     if
     :: n0 > PLIMIT || f < n0 || g ->
        net(toR[x0], QR, REJECTED, x0, 0, 0)   /* the original error goes back */
     :: else ->
        pserial++;
        f = 0; k = 0;
        do
        :: f < n0 ->
           if
           :: pp[k].st == FREE ->
              assert(pp[k].wip == 0);
              pp[k].st = LEASED; pp[k].owner = x0; pp[k].gen = pserial;
              pp[k].wip = 1; pp[k].wsrc = x0; pp[k].wgen = pserial;   /* forward pass in flight */
              ppg[x0 * PMAX + f] = k; f++
           :: else -> skip
           fi;
           k++
        :: else -> break
        od;
        pused = pused + n0;
        ps[x0] = P_COMP; pn[x0] = n0; pgn[x0] = pserial
     fi
  fi
}

/*
 * Send what the credit window allows; after the last frame, COMMIT with the digest.
 * Called as soon as sending is possible (compute landed, credit arrived): a slower
 * sender is the same as a slower network, which the channels already model.
 */
inline p_send(x0) {
  do
  :: ps[x0] == P_SEND && psent[x0] < pcred[x0] + W ->
     k = ppg[x0 * PMAX + psent[x0]];
     z = pp[k].data;                               /* the frame's payload: what the page holds */
     if
     :: skip
     :: faults > 0 -> faults--; z = z | BAD       /* corrupted in transit */
     fi;
     net(toD, QD, DATA, x0, psent[x0], z);
     psent[x0]++;
     if
     :: psent[x0] == pn[x0] ->
        g = x0; k = 0;                             /* digest over the KV, in token order */
        do
        :: k < pn[x0] -> if :: pp[ppg[x0 * PMAX + k]].data != x0 -> g = 0 :: else -> skip fi; k++
        :: else -> break
        od;
        net(toD, QD, COMMIT, x0, pn[x0], g);
        ps[x0] = P_WAIT
     :: else -> skip
     fi
  :: else -> break
  od;
  z = 0; g = 0; k = 0
}

/* The forward pass for one transfer finishes: its KV lands in all its pages. */
inline p_land(q) {
  g = pp[q].gen; o = pp[q].owner;
  k = 0;
  do
  :: k < PPAGES ->
     if
     :: pp[k].wip && pp[k].wgen == g ->
        pp[k].data = pp[k].wsrc; pp[k].dgen = pp[k].wgen;
        pp[k].wip = 0; pp[k].wsrc = 0; pp[k].wgen = 0;
        if :: pp[k].st == DRAIN -> p_free(k) :: else -> skip fi
     :: else -> skip
     fi;
     k++
  :: else -> break
  od;
  if
  :: ps[o] == P_COMP && pgn[o] == g -> ps[o] = P_SEND; p_send(o)
  :: else -> skip
  fi
}

/* Retransmit what is unacknowledged: DATA frames past the credit, and COMMIT. */
inline p_retransmit(x0) {
  retries--;
  t = pcred[x0];
  do
  :: t < psent[x0] ->
     k = ppg[x0 * PMAX + t];
     net(toD, QD, DATA, x0, t, pp[k].data);
     t++
  :: else -> break
  od;
  if
  :: ps[x0] == P_WAIT ->
     g = x0; k = 0;
     do
     :: k < pn[x0] -> if :: pp[ppg[x0 * PMAX + k]].data != x0 -> g = 0 :: else -> skip fi; k++
     :: else -> break
     od;
     net(toD, QD, COMMIT, x0, pn[x0], g)
  :: else -> skip
  fi;
  t = 0; g = 0
}

inline p_expire(q) {
  o = pp[q].owner; g = pp[q].gen;
  if
  :: LIVE_P(o) && pgn[o] == g ->
     p_stop(o);
     net(toD, QD, ABORT, o, 0, 0)
  :: else -> p_release_gen(g)
  fi
}

/* The lease covers the un-acknowledged send; the forward pass itself is not under it. */
#define P_EXPIRABLE(q) (pp[q].st == LEASED && !(ps[pp[q].owner] == P_COMP && pgn[pp[q].owner] == pp[q].gen))
#define P_ANY_EXPIRABLE (P_EXPIRABLE(0) || P_EXPIRABLE(1) || P_EXPIRABLE(2))
inline p_pick_expirable() {
  if
  :: P_EXPIRABLE(0) -> q = 0
  :: P_EXPIRABLE(1) -> q = 1
  :: P_EXPIRABLE(2) -> q = 2
  fi
}
#define P_CAN_RETX(x) (retries > 0 && ((ps[x] == P_SEND && pcred[x] < psent[x]) || ps[x] == P_WAIT))

#define P_SCRUB m = 0; x = 0; y = 0; z = 0; k = 0; f = 0; g = 0; o = 0; t = 0; q = 0


proctype Prefill() {
  mtype m; byte x, y, z, k, f, g, o, t, q;
end_p:
  do
  :: atomic { toP?m, x, y, z ->
       if
       :: m == PREFILL -> p_prefill(x, y)
       :: m == CREDIT ->
          if
          :: (ps[x] == P_SEND || ps[x] == P_WAIT) && y > pcred[x] && y <= psent[x] ->
             pcred[x] = y; p_send(x)
          :: else -> skip
          fi
       :: m == ACK ->
          if
          :: ps[x] == P_WAIT -> p_stop(x)    /* deferred release: only now */
          :: else -> skip
          fi
       :: m == ABORT -> p_stop(x)
       :: m == CANCEL ->
          p_stop(x);
          net(toR[x], QR, CANCELLED, x, FROM_P, 0)
       :: else -> skip
       fi;
       P_SCRUB }
  :: atomic { faults > 0 && len(toP) > 1 ->
       faults--; toP?m, x, y, z; toP!m, x, y, z; P_SCRUB }
  :: atomic { pp[0].wip || pp[1].wip || pp[2].wip ->   /* a forward pass finishes */
       if
       :: pp[0].wip -> q = 0
       :: pp[1].wip -> q = 1
       :: pp[2].wip -> q = 2
       fi;
       p_land(q); P_SCRUB }
  /* Lease expiry, as on decode: on timeout, or early as a timing fault. */
  :: atomic { timeout && P_ANY_EXPIRABLE -> p_pick_expirable(); p_expire(q); P_SCRUB }
  :: atomic { faults > 0 && P_ANY_EXPIRABLE -> faults--; p_pick_expirable(); p_expire(q); P_SCRUB }
  /* Retransmission timer: only when nothing else moves (an early one is a duplicate). */
  :: atomic { timeout && (P_CAN_RETX(1) || P_CAN_RETX(NREQ)) ->
       if
       :: P_CAN_RETX(1) -> x = 1
       :: P_CAN_RETX(NREQ) -> x = NREQ
       fi;
       p_retransmit(x); P_SCRUB }
  :: atomic { faults > 0 ->                   /* crash and restart */
       faults--;
       x = 1;
       do
       :: x <= NREQ -> p_clear(x); ps[x] = P_NONE; x++
       :: else -> break
       od;
       P_SCRUB }
  od
}

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
