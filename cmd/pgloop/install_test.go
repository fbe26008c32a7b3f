package main

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/pgloop/pgloop/pkg/operator"
)

// The two ways an install sets the default backup repository, outside
// this module's reach: hack/release's tests render them, these check that
// what they set are this operator's flags.
const (
	backupOverlayEnv = "../../manifests/operator-with-backups/operator.env"
	chartHelpers     = "../../charts/pgloop/templates/_helpers.tpl"
)

// TestBackupOverlayEnv: every variable of manifests/operator-with-backups'
// operator.env, the commented-out ones too, is a flag's PGLOOP_ variable,
// and the file as shipped (and with every line uncommented) is a
// configuration the operator accepts, with the repository it names.
func TestBackupOverlayEnv(t *testing.T) {
	f, err := os.Open(backupOverlayEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags := map[string]bool{}
	newOperatorCmd().Flags().VisitAll(func(fl *pflag.Flag) { flags[envName(fl.Name)] = true })
	shipped, all := map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		commented := strings.HasPrefix(line, "#")
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "#"), "=")
		if !ok || !strings.HasPrefix(name, envPrefix) {
			continue // prose
		}
		if !flags[name] {
			t.Errorf("%s: %s is no flag's variable", backupOverlayEnv, name)
		}
		all[name] = value
		if !commented {
			shipped[name] = value
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]map[string]string{"as shipped": shipped, "every line": all} {
		t.Run(name, func(t *testing.T) {
			cfg, out, err := runOperator(t, env)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			want := operator.DefaultConfig().Backup
			want.Endpoint, want.Bucket, want.Region, want.SecretName = "s3.eu-central-1.amazonaws.com", "my-backups", "eu-central-1", "backup-credentials"
			if name == "every line" {
				want.CAKey = "ca.crt"
			}
			if cfg.Backup != want {
				t.Errorf("backup repository %+v, want %+v", cfg.Backup, want)
			}
		})
	}
}

// TestChartBackupFlags: the flags the chart's backup values become are
// the operator's.
func TestChartBackupFlags(t *testing.T) {
	raw, err := os.ReadFile(chartHelpers)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(raw), `define "pgloop.backupArgs"`)
	if start < 0 {
		t.Fatalf("%s defines no pgloop.backupArgs", chartHelpers)
	}
	// (list "FLAG" "value") pairs and "--FLAG=..." formats.
	re := regexp.MustCompile(`\(list "([a-z0-9-]+)" "[A-Za-z]+"\)|"--([a-z0-9-]+)=`)
	var names []string
	for _, m := range re.FindAllStringSubmatch(string(raw[start:]), -1) {
		names = append(names, m[1]+m[2])
	}
	if len(names) < 12 {
		t.Fatalf("found the flags %v in pgloop.backupArgs, want 12", names)
	}
	fs := newOperatorCmd().Flags()
	for _, name := range names {
		if fs.Lookup(name) == nil {
			t.Errorf("the chart's backup values give --%s, which the operator does not have", name)
		}
	}
}
