package redisstore

import (
	"context"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// TakeLease implements core.Leaser: one script call, on the bucket's key
// as Take names it, so that leased and unleased decisions on one bucket
// see each other's tokens. It goes through the bucket's failure domain's
// circuit breaker as a take does, and is not batched.
func (s *Store) TakeLease(ctx context.Context, b core.Bucket, need, size int64, now time.Time) (core.LeaseGrant, error) {
	if err := core.CheckLease(&b, need, size, now); err != nil {
		return core.LeaseGrant{}, err
	}
	reply, err := s.lease(ctx, redisscript.ModeLease, b, need, size, now)
	if err != nil {
		return core.LeaseGrant{}, err
	}
	at, st, granted, err := redisscript.DecodeLease(reply, need, size)
	if err != nil {
		return core.LeaseGrant{}, err
	}
	return core.LeaseGrant{Granted: granted, State: st, At: at}, nil
}

// ReturnLease implements core.Leaser: one script call, which never fills
// the bucket beyond its burst.
func (s *Store) ReturnLease(ctx context.Context, b core.Bucket, n int64, now time.Time) error {
	if err := core.CheckLease(&b, n, 0, now); err != nil {
		return err
	}
	reply, err := s.lease(ctx, redisscript.ModeGiveBack, b, n, 0, now)
	if err != nil {
		return err
	}
	_, _, err = redisscript.DecodeGiveBack(reply)
	return err
}

// lease runs one lease call in mode on b and returns the script's reply.
func (s *Store) lease(ctx context.Context, mode string, b core.Bucket, n, size int64, now time.Time) (string, error) {
	nowArg := redisscript.NowArg(now)
	if nowArg == redisscript.ServerClock && s.clock != nil {
		nowArg = redisscript.NowArg(s.clock.Now())
	}
	key := s.keys.Key(b.Rule, b.Key)
	dm := s.domains.of(s.slot(key))
	probe, open := dm.br.Admit()
	if open != nil {
		s.n.refused.Add(1)
		return "", open
	}
	keys, args := redisscript.LeaseArgs(mode, nowArg, s.minTTL, key, b.Limit, n, size)
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	sent := time.Now()
	reply, _, err := s.send(cctx, keys, args, 0)
	cancel()
	err = ctxErr(ctx, err)
	s.settle(ctx, dm, probe, true, err)
	if mode == redisscript.ModeLease {
		s.n.leases.Add(1)
	} else {
		s.n.returns.Add(1)
	}
	// What local denials knew of the bucket: a lease only lowers its
	// tokens, which keeps remembered denials right, but the cached
	// bucket state is stale; a return raises them, which no local denial
	// may ignore.
	switch {
	case s.local != nil && mode == redisscript.ModeLease:
		s.local.unknown(keys, sent, time.Now())
	case s.local != nil:
		s.local.forget(keys, sent, time.Now())
	case s.denials != nil && mode == redisscript.ModeGiveBack:
		s.denials.forget(key)
	}
	return reply, err
}
