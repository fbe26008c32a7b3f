package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgloop/pgloop/pkg/instance"
)

// exitCode is the code err asks pgloop to exit with: a start-up program
// (pgloop instance, pgloop pooler) exits with its program's code (an error
// with an ExitCode method), anything else with 1.
func exitCode(err error) int {
	var coded interface{ ExitCode() int }
	if errors.As(err, &coded) {
		return coded.ExitCode()
	}
	return 1
}

const instanceLong = `Start Patroni and PostgreSQL in a pod of pgloop's instance image: the image's entrypoint.

It reads the environment pgloop gives the pod, the one zalando's Spilo image reads
(SCOPE, PGROOT, PGVERSION, POD_IP, POD_NAMESPACE, PGUSER_*/PGPASSWORD_*,
KUBERNETES_*, SPILO_CONFIGURATION, SSL_*_FILE, PGBACKREST_*), writes Patroni's
configuration as Spilo's configure_spilo.py would for pgloop's image
($PGHOME/postgres.yml, 0600), makes a self-signed certificate when the pod mounts
none, then runs Patroni: the signals the container gets are forwarded to it, the
processes it orphans are reaped, and it exits with Patroni's code. Input it cannot
honour (a PostgreSQL version the image lacks, Spilo's own clone or standby
scripts, a SPILO_CONFIGURATION that is not JSON...) is an error on stderr and exit
code 1, with nothing written. See docs/instance.md.

The flags are for running outside a container (the test plane's process kubelet,
a developer's machine): in pgloop's image none is needed.`

func newInstanceCmd() *cobra.Command {
	var (
		check   bool
		config  string
		volumes []string
		m       instance.Machine
	)
	cmd := &cobra.Command{
		Use:   "instance [flags] [-- PATRONI-COMMAND...]",
		Short: "Start Patroni and PostgreSQL in a pod of pgloop's instance image (its entrypoint)",
		Long:  instanceLong,
		RunE: func(cmd *cobra.Command, args []string) error {
			env := environ()
			detected := instance.Detect(env)
			if m.PodIP == "" {
				m.PodIP = detected.PodIP
			}
			if m.Name == "" {
				m.Name = detected.Name
			}
			if m.MemoryMB == 0 {
				m.MemoryMB = detected.MemoryMB
			}
			if len(volumes) > 0 {
				m.Mounts = map[string]string{}
				for _, v := range volumes {
					c, l, ok := strings.Cut(v, "=")
					if !ok || c == "" || l == "" {
						return fmt.Errorf("--volume %q: want CONTAINER-PATH=LOCAL-PATH", v)
					}
					m.Mounts[c] = l
				}
			}
			o := instance.Options{
				Env: env, Machine: m, ConfigFile: config, Patroni: args,
				Logf: func(format string, a ...any) {
					fmt.Fprintf(cmd.ErrOrStderr(), "pgloop instance: "+format+"\n", a...)
				},
			}
			if check {
				out, dropped, err := instance.PatroniConfig(env, m)
				if err != nil {
					return err
				}
				for _, d := range dropped {
					o.Logf("left out of Spilo's configuration: %s", d)
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			code, err := instance.Start(o)
			if err != nil {
				return err
			}
			if code != 0 {
				cmd.SilenceErrors = true // Patroni has said why
				return exitError{code: code, what: "patroni"}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&check, "check", false, "print the Patroni configuration the environment gives and exit, writing and starting nothing")
	f.StringVar(&config, "config", "", "where Patroni's configuration goes (default $PGHOME/postgres.yml)")
	f.StringArrayVar(&volumes, "volume", nil, "CONTAINER-PATH=LOCAL-PATH: outside a container, where a container path is (repeatable); paths on no volume are errors")
	f.BoolVar(&m.ListenOnPodIP, "listen-pod-ip", false, "listen on the pod IP only rather than on every address")
	f.StringVar(&m.PodIP, "pod-ip", "", "the pod's IP (default $POD_IP)")
	f.StringVar(&m.Name, "name", "", "Patroni's member name (default the hostname)")
	f.Float64Var(&m.MemoryMB, "memory-mb", 0, "the container's memory in MiB, which sizes max_connections and shared_buffers (default its cgroup's limit)")
	f.StringVar(&m.SocketDir, "socket-dir", instance.DefaultSocketDir, "PostgreSQL's socket directory, where pgpass goes too")
	f.StringVar(&m.BinDir, "bin-dir", "", "PostgreSQL's bin directory (default /usr/lib/postgresql/$PGVERSION/bin)")
	f.StringVar(&m.Kubeconfig, "kubeconfig", "", "outside a cluster, the kubeconfig Patroni uses (with --kube-context)")
	f.StringVar(&m.KubeContext, "kube-context", "", "the kubeconfig's context")
	f.StringVar(&m.SharedBuffers, "shared-buffers", "", "replace Spilo's shared_buffers (a fifth of the memory), e.g. 16MB for many instances on one machine")
	return cmd
}

// environ is the process's environment as a map.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}
