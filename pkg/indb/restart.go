package indb

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/pgloop/pgloop/pkg/act"
	"github.com/pgloop/pgloop/pkg/patroni"
)

// RestartMembers restarts pods' PostgreSQL through their Patroni, what is
// pending only (POST /restart with restart_pending): a member with nothing
// pending any more is left alone. The primary's restart is paused for at
// the primary's pooler as a switchover is (poolerpause.go), when the status
// records that pause (from and to the primary itself).
func (a *Actor) RestartMembers(ctx context.Context, key string, pods []string) error {
	r, err := a.run(key)
	if err != nil {
		return err
	}
	// A member restarts whichever is the primary.
	pg, all, primary, err := r.clusterMembers(ctx)
	if pg == nil || err != nil && !isWaiting(err) {
		return err
	}
	for _, name := range pods {
		i := slices.IndexFunc(all, func(m member) bool { return m.pod.Name == name })
		if i < 0 {
			return fmt.Errorf("pod %s publishes no Patroni member data (%w)", name, act.ErrWaiting)
		}
		if primary != nil && primary.pod.Name == name {
			err = r.restartPrimary(ctx, pg, &all[i])
		} else {
			err = r.restartMember(ctx, &all[i])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// restartMember restarts one member's PostgreSQL through its Patroni,
// what is pending only.
func (r *run) restartMember(ctx context.Context, m *member) error {
	name := m.pod.Name
	base, err := m.APIBase()
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	err = r.patroni.Restart(ctx, base, true, r.restartTimeout)
	switch {
	case errors.Is(err, patroni.ErrNothingToRestart):
		r.log.WithField("pod", name).Info("nothing pending a restart any more")
	case err != nil:
		return fmt.Errorf("restart pod %s: %w", name, err)
	default:
		r.log.WithField("pod", name).Info("member restarted")
	}
	return nil
}
