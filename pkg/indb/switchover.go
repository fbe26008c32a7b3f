package indb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Switchover asks the primary's Patroni to hand its role to the pod to
// (POST /switchover); Patroni answers once it is done. Around it
// (poolerpause.go): a CHECKPOINT on the primary first, so its shutdown
// checkpoint is short; when the status records a pause of the primary's
// pooler, PAUSE on its pods before, and after, once the new primary takes
// writes and the master Service routes to it, RESUME, which also follows a
// failure or the step's deadline.
func (a *Actor) Switchover(ctx context.Context, key, from, to string) (err error) {
	r, err := a.run(key)
	if err != nil {
		return err
	}
	pg, all, primary, err := r.clusterMembers(ctx)
	switch {
	case pg == nil:
		return err
	case isWaiting(err) && r.leftPrimary(ctx, pg, all, from):
		// No member publishes as the primary yet, and from has left
		// the role: it is on its way (a later plan carried this
		// switchover again while Patroni answered the first, and the
		// former primary's pod is already replaced). Asking again would
		// fail, and hold the rollout for a retry, for nothing.
		r.log.WithField("from", from).Info("switchover under way: no longer the primary")
		return nil
	case err != nil:
		return err
	case primary.pod.Name != from:
		// Patroni moved the role already: the rollout goes on.
		return nil
	}
	base, err := primary.APIBase()
	if err != nil {
		return fmt.Errorf("pod %s: %w", from, err)
	}
	super, err := r.superuser(ctx, pg, "")
	if err != nil {
		return err
	}
	r.checkpoint(ctx, primary, super)
	began := time.Now()
	paused := r.pausePoolers(ctx, from, to)
	resume := sync.OnceValue(func() error { return r.resumePoolers(ctx, paused, began) })
	defer func() {
		if rerr := resume(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	var cand *member
	if i := slices.IndexFunc(all, func(m member) bool { return m.pod.Name == to }); i >= 0 {
		cand = &all[i]
	} else if len(paused) > 0 {
		r.log.WithField("to", to).Warn("the new primary publishes no member data: the pooler is resumed once Patroni answers")
	}
	switching := time.Now()
	answer := make(chan error, 1)
	go func() { answer <- r.patroni.Switchover(ctx, base, from, to) }()
	if len(paused) > 0 && cand != nil {
		// Patroni answers the switchover up to a second after it is
		// done (it looks once a second): the poolers are resumed as
		// soon as the new primary takes writes and the Service routes
		// to it, Patroni's answer or not (awaitSwitch).
		if err := r.awaitSwitch(ctx, pg, cand, super, answer); err != nil {
			r.log.WithError(err).Warn("resuming the pooler anyway")
		}
		_ = resume()
	}
	if err := <-answer; err != nil {
		return err
	}
	r.log.WithField("from", from).WithField("to", to).WithField("took", time.Since(switching).Round(time.Millisecond)).Info("switched over")
	return nil
}

// leftPrimary reports whether pod has left the primary's role for sure:
// its member data say it does not lead, or it is terminating or gone. A
// pod that publishes no member data (yet) has not.
func (r *run) leftPrimary(ctx context.Context, pg *v1.Postgresql, all []member, pod string) bool {
	if i := slices.IndexFunc(all, func(m member) bool { return m.pod.Name == pod }); i >= 0 {
		return !all[i].IsLeaderRole()
	}
	pods, err := r.pods(ctx, pg)
	if err != nil {
		return false
	}
	i := slices.IndexFunc(pods, func(p *corev1.Pod) bool { return p.Name == pod })
	return i < 0 || pods[i].DeletionTimestamp != nil
}
