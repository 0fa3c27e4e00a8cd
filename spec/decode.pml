/*
 * Decode's half of the model (spec/transfer.pml includes it): page pool operations,
 * the receiver (reserve, DATA, COMMIT, verify, credit) and the Decode process.
 */
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

/*
 * Cumulative credit, as receiver.go counts it (into k): tokens 0.. accepted, in order.
 * Accepted, not landed: writes are drained before verification and before release,
 * not before credit.
 */
inline d_contig(x0) {
  k = 0;
  do
  :: k < dn[x0] && ((dcov[x0] >> k) & 1) -> k++
  :: else -> break
  od
}
inline d_credit(x0) {
  d_contig(x0);
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
           d_contig(x0);
           /* (f) the window receiver.go enforces (a new frame below credit + W) never
              refuses an honest sender, whatever the network and prefill crashes did.
              Checked until decode crashes: the model then still delivers frames sent to
              the dead incarnation, and a duplicated RESERVE can re-create the id, so a
              stale frame can reach a reservation that never saw the ones before it. In
              the code a crash ends every connection, and a reservation takes frames only
              from the one connection that opened it. */
           assert(dcrashed || t0 < k + W);
#ifdef REACH_OUT_OF_ORDER
           assert(t0 == k);   /* witness: a frame accepted ahead of one still missing */
#endif
           dcov[x0] = dcov[x0] | (1 << t0);
           p = dpg[x0 * DMAX + t0];
           assert(dp[p].st == LEASED && dp[p].owner == x0 && dp[p].wip == 0);
           dp[p].wip = 1; dp[p].wsrc = pl; dp[p].wgen = dgn[x0];
           dpend[x0]++;
           if
           :: t0 == k -> d_credit(x0)             /* the credit moved: CREDIT (step 1 for W < 4) */
           :: else -> skip                        /* out of order: credit unchanged */
           fi
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
       dcrashed = 1;
       x = 1;
       do
       :: x <= NREQ -> d_clear(x); ds[x] = D_NONE; x++
       :: else -> break
       od;
       D_SCRUB }
  od
}
