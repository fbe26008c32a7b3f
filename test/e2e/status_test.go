package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
	"github.com/pgloop/pgloop/test/testbed"
)

// TestStatusCommand runs `pgloop status` against the real plane (issue 5):
// with one healthy and one stuck cluster the list shows Running and
// Degraded with the scheduler's reason and the next retry timer, and
// --watch prints the transitions when the healthy cluster is scaled.
func TestStatusCommand(t *testing.T) {
	ns := env.Namespace(t)
	env.StartLabeller(t, ns)
	env.StartOperator(t, "operator", []string{ns}, "--create-timeout", "10s")
	pgloop := env.operatorBinary(t)
	ctx := Context(t, 2*stepDeadline)

	env.CreateCluster(t, ns, "healthy", 2)
	env.CreateCluster(t, ns, "stuck", 1, func(pg *v1.Postgresql) {
		pg.Spec.NodeAffinity = &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: testbed.ImpossibleNodeLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"},
				}}}},
			},
		}
	})
	env.MustState(ctx, t, ns, "healthy", fsm.Running)
	env.MustState(ctx, t, ns, "stuck", fsm.Degraded)

	status := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, pgloop, append([]string{"status", "--kubeconfig", env.Plane.Kubeconfig, "-n", ns}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pgloop status %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := status()
	t.Logf("pgloop status:\n%s", list)
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n")[1:] {
		fields := strings.Fields(line)
		rows[fields[0]] = line
	}
	if r := rows["healthy"]; !strings.Contains(r, " Running ") || !strings.Contains(r, "2/2") {
		t.Errorf("healthy row %q: want Running and 2/2", r)
	}
	if r := rows["stuck"]; !strings.Contains(r, " Degraded ") || !strings.Contains(r, "Unschedulable") || !strings.Contains(r, "retry ") {
		t.Errorf("stuck row %q: want Degraded, Unschedulable and the retry timer", r)
	}
	if d := status("stuck"); !strings.Contains(d, "Degraded") || !strings.Contains(d, "node affinity/selector") {
		t.Errorf("detail of the stuck cluster lacks the cause:\n%s", d)
	}

	// --watch streams the transitions of a scale-out.
	watch := exec.CommandContext(ctx, pgloop, "status", "--kubeconfig", env.Plane.Kubeconfig, "-n", ns, "--watch")
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = watch.Process.Kill()
		_ = watch.Wait()
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The watch prints the current state of both clusters first.
	next := func(what string, match func(string) bool) {
		t.Helper()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("watch ended before %s", what)
				}
				t.Logf("watch: %s", line)
				if match(line) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no %s within the deadline", what)
			}
		}
	}
	next("the healthy cluster's first line", func(l string) bool { return strings.Contains(l, "/healthy Running") })
	if _, err := env.MergePatchCluster(ctx, ns, "healthy", `{"spec":{"numberOfInstances":3}}`); err != nil {
		t.Fatal(err)
	}
	next("Running -> Updating", func(l string) bool {
		return strings.Contains(l, "/healthy Running -> Updating (specChanged)")
	})
	next("Updating -> Running", func(l string) bool {
		return strings.Contains(l, "/healthy Updating -> Running (podsReady)") && strings.Contains(l, "3/3")
	})
}
