package indb

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgloop/pgloop/pkg/act"
	"github.com/pgloop/pgloop/pkg/cluster"
	"github.com/pgloop/pgloop/pkg/patroni"
	"github.com/pgloop/pgloop/pkg/pgsql"
)

// Configure makes Patroni's dynamic configuration hold the spec's settings
// (PATCH /config on the primary, only what differs; remove lists
// parameters the spec no longer sets) and checks that every member runs
// them: the value in its postgresql.conf, applied or pending a restart
// that its Patroni reports. It waits (act.ErrWaiting) while a member has not
// reloaded yet.
func (a *Actor) Configure(ctx context.Context, key string, remove []string) error {
	r, err := a.run(key)
	if err != nil {
		return err
	}
	return partError(act.PartConfig, r.configure(ctx, remove))
}

func (r *run) configure(ctx context.Context, remove []string) error {
	pg, all, primary, err := r.clusterMembers(ctx)
	if pg == nil || err != nil {
		return err
	}
	base, err := primary.APIBase()
	if err != nil {
		return fmt.Errorf("pod %s: %w", primary.pod.Name, err)
	}
	dyn := cluster.Dynamic(pg)
	super, err := r.superuser(ctx, pg, "")
	if err != nil {
		return err
	}
	// A value PostgreSQL refuses is refused here, before Patroni writes it
	// to every member.
	if len(dyn.Parameters) > 0 {
		ep, err := primary.endpoint("primary", super)
		if err != nil {
			return err
		}
		params := map[string]string{}
		for k, v := range dyn.Settings[cluster.ConfigPostgreSQL].(map[string]any)[cluster.ConfigParameters].(map[string]any) {
			params[k] = v.(string)
		}
		if err := pgsql.CheckParameters(ctx, ep, params, r.sqlOptions()); err != nil {
			return err
		}
	}
	current, err := r.patroni.Config(ctx, base)
	if err != nil {
		return err
	}
	if patch := patroni.ConfigPatch(current, dyn.Settings, remove); patch != nil {
		if _, err := r.patroni.PatchConfig(ctx, base, patch); err != nil {
			return err
		}
		r.log.WithField("patch", patch).Info("patroni configuration patched")
	}
	if len(dyn.Parameters) == 0 {
		return nil
	}
	if int32(len(all)) < pg.Spec.NumberOfInstances {
		return fmt.Errorf("%d of %d members publish Patroni member data (%w)", len(all), pg.Spec.NumberOfInstances, act.ErrWaiting)
	}
	want := dyn.Settings[cluster.ConfigPostgreSQL].(map[string]any)[cluster.ConfigParameters].(map[string]any)
	var waiting []string
	for i := range all {
		m := &all[i]
		ep, err := m.endpoint("pod "+m.pod.Name, super)
		if err != nil {
			return err
		}
		got, err := pgsql.Settings(ctx, ep, dyn.Parameters, r.sqlOptions())
		if err != nil {
			return err
		}
		for _, name := range dyn.Parameters {
			s, value := got[name], want[name].(string)
			written := s.InFile && strings.EqualFold(s.File, value)
			switch {
			case !s.Known:
				return fmt.Errorf("parameter %s: PostgreSQL does not know it (unrecognized configuration parameter)", name)
			case sameSetting(s.Current, value):
			case written && s.Applied:
			case written && s.PendingRestart:
				// pg_file_settings says "setting could not be applied"
				// for these: it takes a restart, which Patroni reports.
				if !m.PendingRestart {
					waiting = append(waiting, fmt.Sprintf("pod %s: %s waits for a restart its Patroni does not report yet", m.pod.Name, name))
				}
			case written && s.Error != "":
				return fmt.Errorf("pod %s: parameter %s = %q: %s", m.pod.Name, name, value, s.Error)
			default:
				waiting = append(waiting, fmt.Sprintf("pod %s: %s is %s, want %s", m.pod.Name, name, s.Current, value))
			}
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("waiting for Patroni to apply the configuration (within loop_wait): %s (%w)", strings.Join(waiting, "; "), act.ErrWaiting)
	}
	return nil
}

// sameSetting compares a current_setting value with the spec's value as
// PostgreSQL would: case aside, and on/off spelt as true/false or 1/0.
func sameSetting(current, want string) bool {
	if strings.EqualFold(current, want) {
		return true
	}
	norm := func(s string) string {
		switch strings.ToLower(s) {
		case "on", "true", "yes", "1":
			return "on"
		case "off", "false", "no", "0":
			return "off"
		}
		return s
	}
	return norm(current) == norm(want)
}
