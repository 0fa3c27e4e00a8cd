/*
 * Prefill's half of the model (spec/transfer.pml includes it): page pool operations,
 * the sender (admission, DATA within the window, COMMIT, retransmission) and the
 * Prefill process.
 */
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
#ifdef SENDER_OVERRUN
#define P_WINDOW (W + 1)   /* the bug: one frame more than the window allows */
#else
#define P_WINDOW W
#endif
inline p_send(x0) {
  do
  :: ps[x0] == P_SEND && psent[x0] < pcred[x0] + P_WINDOW ->
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
#ifdef REACH_WINDOW_FULL
  /* witness: the window is full and holds the sender back with frames still to send */
  assert(!(ps[x0] == P_SEND && psent[x0] == pcred[x0] + W && psent[x0] < pn[x0]));
#endif
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
