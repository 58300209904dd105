package rlqs

import (
	"context"
	"time"
)

// tell gives the other replicas this one's words and reads theirs
// (Options.Peers), reporting whether they were read: when they cannot be,
// this replica splits as if alone (fail open), counted, not logged (every
// report and every second would log while Redis is away).
func (s *Service) tell(ctx context.Context, words []PeerWord) bool {
	if len(words) == 0 {
		return false
	}
	if err := s.opts.Peers.Demand(ctx, s.opts.TTL, words); err != nil {
		s.m.peerErrors.Inc()
		return false
	}
	return true
}

// ours is the part of lim this server's Envoys' demand (w.Mine) is of all
// the replicas', never more than the others leave of the rate they say
// they handed out, since their Envoys hold it until their assignments
// lapse (a replica restarted, whose Envoys kept theirs, let the other hand
// out 1.3 times the limit).
func ours(lim shape, w PeerWord) shape {
	if w.Mine <= 0 || lim.rate <= 0 {
		return lim
	}
	rate := lim.rate * w.Mine / (w.Mine + w.Others)
	rate = min(rate, max(0, lim.rate-w.OthersHanded))
	lim.burst *= rate / lim.rate
	lim.rate = rate
	return lim
}

// Run splits every key this server serves again once a second (resplit)
// until ctx is done.
func (s *Service) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.resplit(ctx)
	}
}

// resplit splits every key this server serves again, with the other
// replicas' demand as they last said it: a replica learns of the others'
// Envoys only then, not at its own Envoys' next reports (5 s), which let
// two replicas hand out half as much again as a limit for those seconds.
// The words go in one batch (Peers). With no Peers it only forgets what
// went stale.
func (s *Service) resplit(ctx context.Context) {
	served := s.fleet.served(s.opts.Now(), s.opts.Peers != nil)
	if s.opts.Peers == nil {
		return
	}
	words := make([]PeerWord, 0, len(served))
	for _, k := range served {
		if k.local > 0 {
			words = append(words, PeerWord{Key: k.key, Mine: k.local, Handed: k.handed})
		}
	}
	told := s.tell(ctx, words)
	i := 0
	for _, k := range served {
		lim := k.lim
		if k.local > 0 {
			if told {
				lim = ours(lim, words[i])
			}
			i++
		}
		s.fleet.resplit(k.key, lim, s.opts.Now())
	}
}
