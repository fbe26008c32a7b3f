package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/pgloop/pgloop/pkg/metrics"
	"github.com/pgloop/pgloop/pkg/operator"
)

// runOperator runs `operator args...` with the environment env and
// returns the Config the operator would have run with (nil if it was not
// run) and the error.
func runOperator(t *testing.T, env map[string]string, args ...string) (*operator.Config, string, error) {
	t.Helper()
	var got *operator.Config
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cmd := newOperatorCmdWith(lookup, func(_ context.Context, cfg operator.Config) error {
		got = &cfg
		return nil
	})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	// Never nil: cobra reads os.Args, the test binary's flags, for nil.
	cmd.SetArgs(append([]string{}, args...))
	cmd.SilenceUsage = true
	err := cmd.Execute()
	return got, out.String(), err
}

func TestOperatorDefaults(t *testing.T) {
	got, _, err := runOperator(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := operator.DefaultConfig(); !reflect.DeepEqual(*got, want) {
		t.Errorf("config\n%+v\nwant the operator's defaults\n%+v", *got, want)
	}
}

func TestOperatorFlagsAndEnv(t *testing.T) {
	def := operator.DefaultConfig()
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    func(c *operator.Config)
		wantErr string
	}{
		{
			name: "the end-to-end suite's command line",
			args: []string{"--kubeconfig", "/k", "--namespace", "ns1", "--leader-elect=false", "--health-addr", "127.0.0.1:0"},
			want: func(c *operator.Config) {
				c.Kubeconfig, c.Namespaces, c.LeaderElect, c.HealthAddr = "/k", []string{"ns1"}, false, "127.0.0.1:0"
			},
		},
		{
			name: "every flag",
			args: []string{
				"--kubeconfig=/k", "--namespace=a,b", "--namespace=c", "--leader-elect=false",
				"--leader-election-namespace=ops", "--leader-election-id=pg-lock",
				"--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=5s",
				"--health-addr=:9090", "--workers=64", "--step-timeout=1m", "--create-timeout=20m", "--update-timeout=30m",
				"--loss-grace=30s", "--resync-period=1h", "--retry-base=1s", "--retry-max=10m", "--spilo-image=my/spilo:1",
				"--max-rolling-clusters=3", "--kube-qps=200", "--kube-burst=400", "--cache-sync-timeout=5m",
				"--log-format=json", "--log-level=debug", "--memory-limit=1Gi",
			},
			want: func(c *operator.Config) {
				c.Kubeconfig, c.Namespaces, c.LeaderElect = "/k", []string{"a", "b", "c"}, false
				c.LeaderElectionNamespace, c.LeaderElectionID = "ops", "pg-lock"
				c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 30*time.Second, 20*time.Second, 5*time.Second
				c.HealthAddr, c.Workers, c.StepTimeout = ":9090", 64, time.Minute
				c.CreateTimeout, c.UpdateTimeout, c.ResyncPeriod = 20*time.Minute, 30*time.Minute, time.Hour
				c.LossGrace = 30 * time.Second
				c.RetryBase, c.RetryMax, c.SpiloImage = time.Second, 10*time.Minute, "my/spilo:1"
				c.KubeQPS, c.KubeBurst, c.CacheSyncTimeout = 200, 400, 5*time.Minute
				c.LogFormat, c.LogLevel = "json", "debug"
				c.MaxRollingClusters = 3
				c.MemoryLimit = 1 << 30
			},
		},
		{
			name: "environment",
			env: map[string]string{
				"PGLOOP_NAMESPACE": "a, b", "PGLOOP_LEADER_ELECT": "false", "PGLOOP_WORKERS": "8",
				"PGLOOP_RESYNC_PERIOD": "30m", "PGLOOP_KUBE_QPS": "20.5", "PGLOOP_LOG_FORMAT": "json",
				"PGLOOP_LEADER_ELECT_LEASE_DURATION": "1m", "PGLOOP_LOSS_GRACE": "0s", "PGLOOP_MAX_ROLLING_CLUSTERS": "0",
			},
			want: func(c *operator.Config) {
				c.Namespaces, c.LeaderElect, c.Workers, c.ResyncPeriod = []string{"a", "b"}, false, 8, 30*time.Minute
				c.KubeQPS, c.LogFormat, c.LeaseDuration = 20.5, "json", time.Minute
				c.LossGrace, c.MaxRollingClusters = 0, 0
			},
		},
		{
			name: "the memory limit as the downward API gives the container's",
			env:  map[string]string{"PGLOOP_MEMORY_LIMIT": "1073741824"},
			want: func(c *operator.Config) { c.MemoryLimit = 1 << 30 },
		},
		{
			name:    "a memory limit that is no quantity",
			env:     map[string]string{"PGLOOP_MEMORY_LIMIT": "1 GB"},
			wantErr: `invalid PGLOOP_MEMORY_LIMIT="1 GB"`,
		},
		{
			name: "a flag wins over its variable",
			env:  map[string]string{"PGLOOP_WORKERS": "8", "PGLOOP_LOG_LEVEL": "debug"},
			args: []string{"--workers", "4"},
			want: func(c *operator.Config) { c.Workers, c.LogLevel = 4, "debug" },
		},
		{
			name: "an empty namespace variable means all namespaces",
			env:  map[string]string{"PGLOOP_NAMESPACE": ""},
			want: func(c *operator.Config) {},
		},
		{
			name: "KUBECONFIG",
			env:  map[string]string{"KUBECONFIG": "/a:/b"},
			want: func(c *operator.Config) { c.Kubeconfig = "/a:/b" },
		},
		{
			name: "PGLOOP_KUBECONFIG wins over KUBECONFIG",
			env:  map[string]string{"KUBECONFIG": "/a", "PGLOOP_KUBECONFIG": "/p"},
			want: func(c *operator.Config) { c.Kubeconfig = "/p" },
		},
		{
			name: "--kubeconfig wins over both",
			env:  map[string]string{"KUBECONFIG": "/a", "PGLOOP_KUBECONFIG": "/p"},
			args: []string{"--kubeconfig", "/f"},
			want: func(c *operator.Config) { c.Kubeconfig = "/f" },
		},
		{
			name: "the Lease's namespace defaults to the pod's",
			env:  map[string]string{"POD_NAMESPACE": "pgloop-system"},
			want: func(c *operator.Config) { c.LeaderElectionNamespace = "pgloop-system" },
		},
		{
			name: "and the flag wins over it",
			env:  map[string]string{"POD_NAMESPACE": "pgloop-system"},
			args: []string{"--leader-election-namespace", "ops"},
			want: func(c *operator.Config) { c.LeaderElectionNamespace = "ops" },
		},
		{
			name:    "a bad variable is named",
			env:     map[string]string{"PGLOOP_STEP_TIMEOUT": "soon"},
			wantErr: `invalid PGLOOP_STEP_TIMEOUT="soon"`,
		},
		{
			name:    "a bad flag",
			args:    []string{"--workers", "many"},
			wantErr: `invalid argument "many" for "--workers"`,
		},
		{
			name:    "validation, every error at once",
			args:    []string{"--workers=0", "--step-timeout=0s", "--log-format=xml", "--retry-base=1m", "--retry-max=1s"},
			wantErr: "invalid configuration:\nworkers must be at least 1, got 0\nstep-timeout must be a positive duration, got 0s\nretry-max (1s) must not be less than retry-base (1m0s)\nlog-format must be",
		},
		{
			name:    "validation of variables",
			env:     map[string]string{"PGLOOP_NAMESPACE": "Not_A_Namespace"},
			wantErr: `namespace "Not_A_Namespace" is not a valid namespace name`,
		},
		{
			name:    "no arguments",
			args:    []string{"extra"},
			wantErr: `unknown command "extra"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := runOperator(t, tc.env, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if got != nil {
					t.Error("the operator ran with an invalid configuration")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := def
			tc.want(&want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("config\n%+v\nwant\n%+v", *got, want)
			}
		})
	}
}

func TestOperatorRunError(t *testing.T) {
	boom := errors.New("boom")
	cmd := newOperatorCmdWith(func(string) (string, bool) { return "", false },
		func(context.Context, operator.Config) error { return boom })
	cmd.SetArgs([]string{})
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	if err := cmd.Execute(); !errors.Is(err, boom) {
		t.Fatalf("error %v, want Run's", err)
	}
}

func TestOperatorHelp(t *testing.T) {
	_, out, err := runOperator(t, nil, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PGLOOP_WORKERS", "$KUBECONFIG", "/readyz", `--workers int`, "(default 16)",
		"(default 10m0s)", `(default "pgloop-operator")`, `(default ":8080")`, `(default "text")`} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestUserGuideTables keeps docs/user-guide.md's configuration table
// generated from the operator's flags and its metrics list from
// pkg/metrics. go test -update rewrites them.
func TestUserGuideTables(t *testing.T) {
	const path = "../../docs/user-guide.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, section := range []struct{ name, body string }{
		{"operator-flags", flagsTable()},
		{"operator-metrics", metricsTable()},
	} {
		begin := "<!-- " + section.name + ":begin (generated by `make generate-docs`) -->\n"
		end := "<!-- " + section.name + ":end -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i {
			t.Fatalf("%s lacks the %s markers", path, section.name)
		}
		text = text[:i+len(begin)] + section.body + text[j:]
	}
	if *update {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if text != string(raw) {
		t.Fatalf("%s's tables are out of date: run `go test ./cmd/pgloop -run TestUserGuideTables -update`", path)
	}
}

// flagsTable documents every flag of `pgloop operator` as the command
// defines it, in an environment without POD_NAMESPACE.
func flagsTable() string {
	cmd := newOperatorCmdWith(func(string) (string, bool) { return "", false }, nil)
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		def := "`" + f.DefValue + "`"
		if d, ok := f.Annotations[docsDefault]; ok {
			def = d[0]
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | %s | %s |\n", f.Name, envName(f.Name), def, escapeCell(f.Usage))
	})
	return b.String()
}

func metricsTable() string {
	var b strings.Builder
	b.WriteString("| metric | type | labels | meaning |\n|---|---|---|---|\n")
	for _, d := range metrics.Descs() {
		labels := slices.Clone(d.Labels)
		for i, l := range labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", d.Name, d.Type, strings.Join(labels, ", "), escapeCell(d.Help))
	}
	return b.String()
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
