// Command bench-isolation measures, on a fresh local control plane, how long
// healthy clusters take to become Running next to 0, 10 and 100 stuck ones,
// and pgloop's own latency from the last pod Ready to status Running (issue
// 6, item 3; package isolation). It prints the table, writes it into
// docs/isolation.md, and exits with status 1 when the ratio of the healthy
// median with the most stuck clusters to the one with none exceeds
// --max-ratio.
//
//	make bench-isolation
//	cd test && go run ./bench/cmd/bench-isolation [flags]
//
// The plane's binaries come from $PGLOOP_BIN, else bin/ of the repository
// (`make testbed`). Ctrl-C stops the run and everything it started.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgloop/pgloop/test/bench/isolation"
	"github.com/pgloop/pgloop/test/pgtest"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	cfg := isolation.DefaultConfig()
	stuck := flag.String("stuck", "0,10,100", "numbers of stuck clusters to measure next to, increasing from 0")
	flag.IntVar(&cfg.Healthy, "healthy", cfg.Healthy, "healthy clusters measured per number of stuck clusters, created one after another")
	flag.IntVar(&cfg.WarmUp, "warmup", cfg.WarmUp, "healthy clusters created, not measured, before the first measurement")
	flag.IntVar(&cfg.Instances, "instances", cfg.Instances, "instances of each healthy cluster")
	flag.DurationVar(&cfg.CreateTimeout, "create-timeout", cfg.CreateTimeout, "the operator's --create-timeout: how soon stuck clusters become Degraded")
	var opArgs listFlag
	flag.Var(&opArgs, "operator-arg", "a further flag for the operator, e.g. --operator-arg=--kube-qps=200 (repeatable; a later flag wins)")
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "fake nodes of the plane")
	flag.Float64Var(&cfg.MaxRatio, "max-ratio", cfg.MaxRatio, "fail when the healthy median with the most stuck clusters exceeds this times the one with none")
	flag.BoolVar(&cfg.RetryRound, "retry-round", cfg.RetryRound, "also measure, after the last K, during a retry round of the stuck clusters (not in the verdict)")
	flag.DurationVar(&cfg.QuietTimeout, "quiet-timeout", cfg.QuietTimeout, "longest wait for the operator to be quiet before measuring")
	doc := flag.String("doc", "docs/isolation.md", "document to write the table into, relative to the repository (empty: none)")
	flag.StringVar(&cfg.WorkDir, "work-dir", "", "keep the operator's log and the plane's directory here (default: a temporary directory, removed after a successful run)")
	timeout := flag.Duration("timeout", 20*time.Minute, "bound of the whole run")
	src := flag.String("source", "", "pgloop tree to build the operator from and read the CRDs of, e.g. an export of another revision (default: this repository)")
	flag.StringVar(&cfg.Revision, "revision", "", "revision to record for the operator (default: git's, of --source)")
	flag.Parse()
	cfg.OperatorArgs = opArgs

	if err := run(cfg, *stuck, *doc, *src, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "bench-isolation:", err)
		os.Exit(1)
	}
}

func run(cfg isolation.Config, stuck, doc, src string, timeout time.Duration) error {
	cfg.Stuck = nil
	for f := range strings.SplitSeq(stuck, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("--stuck: %w", err)
		}
		cfg.Stuck = append(cfg.Stuck, k)
	}
	repo, err := pgtest.RepoRoot()
	if err != nil {
		return err
	}
	cfg.Repo = repo
	if src != "" {
		if cfg.Repo, err = filepath.Abs(src); err != nil {
			return err
		}
	}
	if cfg.WorkDir != "" {
		if cfg.WorkDir, err = filepath.Abs(cfg.WorkDir); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, runErr := isolation.Run(ctx, cfg)
	if res == nil {
		return runErr
	}

	fmt.Println()
	fmt.Printf("Operator flags: %s\n\n", strings.Join(res.OperatorFlags, " "))
	res.WriteTable(os.Stdout)
	fmt.Println()
	res.WriteSegments(os.Stdout)
	fmt.Println()
	res.WriteDetails(os.Stdout)
	fmt.Println()
	if runErr != nil {
		return runErr
	}
	fmt.Println(res.Verdict())
	if doc != "" {
		path := filepath.Join(repo, doc)
		if err := res.UpdateDoc(path); err != nil {
			return fmt.Errorf("while writing %s: %w", path, err)
		}
		fmt.Printf("table written into %s (section %q)\n", path, res.Key())
	}
	if !res.Pass() {
		return errors.New(res.Verdict())
	}
	return nil
}
