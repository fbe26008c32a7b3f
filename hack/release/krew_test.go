package main

import (
	"os"
	"strings"
	"testing"
)

// TestKrewManifest renders hack/krew/pgloop.yaml for the four platforms
// and checks what krew reads of it.
func TestKrewManifest(t *testing.T) {
	tmpl, err := os.ReadFile("../krew/pgloop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var platforms []krewPlatform
	for i, p := range krewPlatforms {
		platforms = append(platforms, krewPlatform{OS: p.OS, Arch: p.Arch, URI: "https://example.com/" + p.archiveName(),
			SHA256: strings.Repeat(string(rune('a'+i)), 64)})
	}
	out, err := renderKrewManifest(tmpl, "v1.2.3", platforms)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	plugin, err := validateKrewManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if plugin.Name != "pgloop" || plugin.Spec.Version != "v1.2.3" || len(plugin.Spec.Platforms) != 4 {
		t.Fatalf("name %q version %q platforms %d", plugin.Name, plugin.Spec.Version, len(plugin.Spec.Platforms))
	}
	for i, pl := range plugin.Spec.Platforms {
		want := platforms[i]
		if pl.URI != want.URI || pl.Sha256 != want.SHA256 || pl.Bin != pluginBin ||
			pl.Selector.MatchLabels["os"] != want.OS || pl.Selector.MatchLabels["arch"] != want.Arch {
			t.Errorf("platform %d: %+v, want %+v", i, pl, want)
		}
	}

	// What krew's validation refuses, this refuses too.
	for name, edit := range map[string]func(string) string{
		"unknown field":     func(s string) string { return strings.Replace(s, "  homepage:", "  homepag:", 1) },
		"apiVersion":        func(s string) string { return strings.Replace(s, "v1alpha2", "v1alpha1", 1) },
		"version without v": func(s string) string { return strings.Replace(s, "version: v1.2.3", "version: 1.2.3", 1) },
		"short sha256":      func(s string) string { return strings.Replace(s, strings.Repeat("a", 64), "abc", 1) },
		"no bin":            func(s string) string { return strings.Replace(s, "bin: kubectl-pgloop", "bin: \"\"", 1) },
		"selector key":      func(s string) string { return strings.Replace(s, "os: linux", "kernel: linux", 1) },
		"two-line short": func(s string) string {
			return strings.Replace(s, "shortDescription: ", "shortDescription: |\n    a\n    ", 1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			broken := edit(string(out))
			if broken == string(out) {
				t.Fatal("the edit changed nothing")
			}
			if _, err := validateKrewManifest([]byte(broken)); err == nil {
				t.Errorf("accepted:\n%s", broken)
			}
		})
	}
}
