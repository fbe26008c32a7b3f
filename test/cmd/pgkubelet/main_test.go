package main

import (
	"io"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParse(t *testing.T) {
	required := []string{"--kubeconfig=/k", "--node-name=proc-1", "--root=/r", "--pod-cidr=127.1.7.0/24"}
	for _, tc := range []struct {
		name    string
		args    []string
		check   func(t *testing.T, c config)
		wantErr string
	}{
		{
			name: "required only, defaults",
			args: required,
			check: func(t *testing.T, c config) {
				o := c.opts
				if o.NodeName != "proc-1" || o.Root != "/r" || o.PodCIDR != "127.1.7.0/24" || c.kubeconfig != "/k" {
					t.Errorf("options = %+v", o)
				}
				if o.NodeIP != "127.0.0.1" || o.Patroni != "/usr/bin/patroni" || o.Python != "/usr/bin/python3" || o.PGBin != "/usr/lib/postgresql/15/bin" || o.PgBouncer != "/usr/sbin/pgbouncer" || c.logLevel != "info" {
					t.Errorf("defaults = %+v, log level %s", o, c.logLevel)
				}
			},
		},
		{
			name: "labels and taints repeat",
			args: append(required, "--label", "zone=a", "--label=disk=ssd", "--taint", "pgloop.dev/data-plane=process:NoSchedule", "--taint=dedicated:NoExecute"),
			check: func(t *testing.T, c config) {
				if want := map[string]string{"zone": "a", "disk": "ssd"}; !reflect.DeepEqual(c.opts.Labels, want) {
					t.Errorf("labels = %v, want %v", c.opts.Labels, want)
				}
				want := []corev1.Taint{
					{Key: "pgloop.dev/data-plane", Value: "process", Effect: corev1.TaintEffectNoSchedule},
					{Key: "dedicated", Effect: corev1.TaintEffectNoExecute},
				}
				if !reflect.DeepEqual(c.opts.Taints, want) {
					t.Errorf("taints = %v, want %v", c.opts.Taints, want)
				}
			},
		},
		{
			name: "image binaries repeat",
			args: append(required, "--image-binary", "ghcr.io/pgloop/pgloop=/b/pgloop", "--image-binary=ghcr.io/pgloop/pgloop:v2=/b/v2/pgloop"),
			check: func(t *testing.T, c config) {
				want := map[string]string{"ghcr.io/pgloop/pgloop": "/b/pgloop", "ghcr.io/pgloop/pgloop:v2": "/b/v2/pgloop"}
				if !reflect.DeepEqual(c.opts.ImageBinaries, want) {
					t.Errorf("image binaries = %v, want %v", c.opts.ImageBinaries, want)
				}
			},
		},
		{name: "relative image binary", args: append(required, "--image-binary", "img=bin/pgloop"), wantErr: "the path must be absolute"},
		{name: "missing required flags", args: []string{"--root=/r"}, wantErr: "missing required flags: --kubeconfig, --node-name, --pod-cidr"},
		{name: "bad label", args: append(required, "--label", "zone"), wantErr: `label "zone": want key=value`},
		{name: "bad taint", args: append(required, "--taint", "k=v:Always"), wantErr: `effect "Always"`},
		{name: "stray argument", args: append(required, "extra"), wantErr: "unexpected arguments: extra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parse error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}
