package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// TestPatroniFields checks zalando's remaining patroni fields on real
// Patroni and PostgreSQL (issue 17): initdb options reach a new cluster's
// initdb (wal-segsize shows it, as it is none of Spilo's defaults);
// failsafe_mode and a permanent physical slot are in Patroni's dynamic
// configuration from the start, and the slot on the primary; an edit turns
// on synchronous_mode with synchronous_mode_strict and
// synchronous_node_count and removes the slot, which leaves the DCS and
// the primary; an edit of initdb is refused by the API server.
func TestPatroniFields(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "patronifields", []string{ns})
	ctx := Context(t, 10*time.Minute)
	const name = "pfields"

	began := time.Now()
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Patroni = &v1.Patroni{
			InitDB:       map[string]string{"encoding": "UTF8", "data-checksums": "true", "wal-segsize": "32"},
			FailsafeMode: ptr.To(true),
			Slots:        map[string]map[string]string{"keep_wal": {"type": "physical"}},
		}
	})
	pg := inEffect(ctx, t, ns, name, 2)
	t.Logf("Running after %v", time.Since(began).Round(time.Millisecond))

	t.Run("initdb options, failsafe_mode and the slot at creation", func(t *testing.T) {
		for setting, want := range map[string]string{"data_checksums": "on", "server_encoding": "UTF8", "wal_segment_size": "32MB"} {
			if got := show(ctx, t, ns, pg.Status.Primary, setting); got != want {
				t.Errorf("SHOW %s = %s, want %s", setting, got, want)
			}
		}
		cfg := patroniConfig(ctx, t, ns, pg.Status.Primary)
		if cfg["failsafe_mode"] != true {
			t.Errorf("Patroni's GET /config failsafe_mode = %v, want true", cfg["failsafe_mode"])
		}
		slots, _ := cfg["slots"].(map[string]any)
		if slot, _ := slots["keep_wal"].(map[string]any); slot["type"] != "physical" {
			t.Errorf("Patroni's GET /config slots = %v, want keep_wal of type physical", cfg["slots"])
		}
		// Patroni creates a permanent slot on its next HA loop.
		waitSlot(ctx, t, ns, pg.Status.Primary, "keep_wal", true)
	})

	t.Run("synchronous settings on, the slot removed", func(t *testing.T) {
		patched := time.Now()
		if _, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"patroni":{"synchronous_mode":true,`+
			`"synchronous_mode_strict":true,"synchronous_node_count":1,"slots":null}}}`); err != nil {
			t.Fatal(err)
		}
		pg = inEffect(ctx, t, ns, name, 2)
		t.Logf("applied, the cluster Running %v after the patch", time.Since(patched).Round(time.Millisecond))
		cfg := patroniConfig(ctx, t, ns, pg.Status.Primary)
		for key, want := range map[string]any{"synchronous_mode": true, "synchronous_mode_strict": true, "synchronous_node_count": 1.0, "failsafe_mode": true} {
			if cfg[key] != want {
				t.Errorf("Patroni's GET /config %s = %v, want %v", key, cfg[key], want)
			}
		}
		if slots, ok := cfg["slots"].(map[string]any); ok && slots["keep_wal"] != nil {
			t.Errorf("Patroni's GET /config slots = %v, want keep_wal gone", slots)
		}
		waitSlot(ctx, t, ns, pg.Status.Primary, "keep_wal", false)
	})

	t.Run("an edit of initdb is refused", func(t *testing.T) {
		_, err := env.MergePatchCluster(ctx, ns, name, `{"spec":{"patroni":{"initdb":{"encoding":"LATIN1"}}}}`)
		if err == nil || !strings.Contains(err.Error(), "patroni.initdb is immutable") {
			t.Errorf("patch of initdb: %v, want the API server's refusal (patroni.initdb is immutable)", err)
		}
	})
}

// waitSlot waits until pod's pg_replication_slots has the slot (exists) or
// not.
func waitSlot(ctx context.Context, t testing.TB, ns, pod, slot string, exists bool) {
	t.Helper()
	conn := env.SQL(ctx, t, env.Pod(ctx, t, ns, pod))
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			t.Fatalf("pod %s: pg_replication_slots: %v", pod, err)
		}
		if (n == 1) == exists {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s: slot %s exists = %v, never %v", pod, slot, !exists, exists)
		case <-time.After(time.Second):
		}
	}
}
