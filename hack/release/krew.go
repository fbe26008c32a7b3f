package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/krew/pkg/constants"
	"sigs.k8s.io/krew/pkg/index"
	"sigs.k8s.io/yaml"
)

// pluginBin is the binary's name in the krew archives: kubectl runs
// kubectl-pgloop for `kubectl pgloop`.
const pluginBin = "kubectl-pgloop"

// platform is one os/arch of the plugin.
type platform struct{ OS, Arch string }

// krewPlatforms are the platforms the plugin is released for.
var krewPlatforms = []platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

// archiveName is the release asset of p's plugin archive.
func (p platform) archiveName() string {
	return fmt.Sprintf("%s_%s_%s.tar.gz", pluginBin, p.OS, p.Arch)
}

// ldflags are the linker flags of a release's binaries: stripped, and
// knowing their version and commit (`pgloop version`), as `make build`.
func ldflags(version, commit string) string {
	return fmt.Sprintf("-s -w -X github.com/pgloop/pgloop/pkg/version.Version=%s -X github.com/pgloop/pgloop/pkg/version.Commit=%s", version, commit)
}

// buildBinary cross-compiles cmd/pgloop of the repository at root for p
// into out, static and with no local paths.
func buildBinary(root string, p platform, version, commit, out string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+ldflags(version, commit), "-o", out, "./cmd/pgloop")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s/%s: %w\n%s", p.OS, p.Arch, err, out)
	}
	return nil
}

// archiveFile is a file of a plugin archive.
type archiveFile struct {
	name string
	mode int64
	body []byte
}

// writeArchive writes files into a tar.gz at path, every entry dated
// modTime and owned by root, so that the same files make the same bytes.
func writeArchive(path string, files []archiveFile, modTime time.Time) error {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: modTime,
			Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(f.body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// pluginArchive builds the plugin for p and writes its archive into dir:
// kubectl-pgloop, and the repository's LICENSE when there is one.
func pluginArchive(root string, p platform, version, commit, dir string, modTime time.Time) (string, error) {
	tmp, err := os.MkdirTemp("", "pgloop-release-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, pluginBin)
	if err := buildBinary(root, p, version, commit, bin); err != nil {
		return "", err
	}
	body, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	files := []archiveFile{{name: pluginBin, mode: 0o755, body: body}}
	if license, err := os.ReadFile(filepath.Join(root, "LICENSE")); err == nil {
		files = append(files, archiveFile{name: "LICENSE", mode: 0o644, body: license})
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	path := filepath.Join(dir, p.archiveName())
	return path, writeArchive(path, files, modTime)
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// krewPlatform is what the manifest's template says of one platform.
type krewPlatform struct {
	OS, Arch, URI, SHA256 string
}

// renderKrewManifest fills in the template (hack/krew/pgloop.yaml) with
// version and the platforms' archives, and checks the result as krew's
// index validation does.
func renderKrewManifest(tmpl []byte, version string, platforms []krewPlatform) ([]byte, error) {
	t, err := template.New("krew").Option("missingkey=error").Parse(string(tmpl))
	if err != nil {
		return nil, fmt.Errorf("krew manifest template: %w", err)
	}
	var out bytes.Buffer
	if err := t.Execute(&out, struct {
		Version   string
		Platforms []krewPlatform
	}{version, platforms}); err != nil {
		return nil, fmt.Errorf("krew manifest template: %w", err)
	}
	if _, err := validateKrewManifest(out.Bytes()); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

var (
	safePluginName = regexp.MustCompile(`^[\w-]+$`)
	validSHA256    = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// validateKrewManifest decodes a plugin manifest strictly (no unknown
// field) into krew's own type and checks what krew's index validation
// (sigs.k8s.io/krew/internal/index/validation, v0.4.3, not importable)
// checks, so that krew-index's CI and `kubectl krew install --manifest`
// accept it.
func validateKrewManifest(data []byte) (*index.Plugin, error) {
	var p index.Plugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("krew manifest: %w", err)
	}
	bad := func(format string, args ...any) (*index.Plugin, error) {
		return nil, fmt.Errorf("krew manifest: "+format, args...)
	}
	switch {
	case p.APIVersion != constants.CurrentAPIVersion:
		return bad("apiVersion %q, want %q", p.APIVersion, constants.CurrentAPIVersion)
	case p.Kind != constants.PluginKind:
		return bad("kind %q, want %q", p.Kind, constants.PluginKind)
	case !safePluginName.MatchString(p.Name):
		return bad("name %q does not match %s", p.Name, safePluginName)
	case p.Spec.ShortDescription == "" || strings.ContainsAny(p.Spec.ShortDescription, "\r\n"):
		return bad("shortDescription %q: want one line", p.Spec.ShortDescription)
	case len(p.Spec.Platforms) == 0:
		return bad("no platform")
	case !strings.HasPrefix(p.Spec.Version, "v"):
		return bad("version %q: krew wants a v prefix", p.Spec.Version)
	}
	if _, err := version.ParseSemantic(p.Spec.Version); err != nil {
		return bad("version %q: %v", p.Spec.Version, err)
	}
	for i, pl := range p.Spec.Platforms {
		switch {
		case pl.URI == "":
			return bad("platform %d: no uri", i)
		case !validSHA256.MatchString(pl.Sha256):
			return bad("platform %d: sha256 %q is not 64 lower-case hex digits", i, pl.Sha256)
		case pl.Bin == "":
			return bad("platform %d: no bin", i)
		case pl.Files != nil && len(pl.Files) == 0:
			return bad("platform %d: files is empty but present", i)
		case pl.Selector == nil || (pl.Selector.MatchLabels == nil && len(pl.Selector.MatchExpressions) == 0):
			return bad("platform %d: no selector", i)
		case pl.Selector.MatchLabels != nil && len(pl.Selector.MatchLabels) == 0:
			return bad("platform %d: matchLabels present but empty", i)
		}
		for _, f := range pl.Files {
			if f.From == "" || f.To == "" {
				return bad("platform %d: a file operation without from or to", i)
			}
		}
		for k := range pl.Selector.MatchLabels {
			if k != "os" && k != "arch" {
				return bad("platform %d: selector key %q (krew knows os and arch)", i, k)
			}
		}
		for _, e := range pl.Selector.MatchExpressions {
			if e.Key != "os" && e.Key != "arch" {
				return bad("platform %d: selector key %q (krew knows os and arch)", i, e.Key)
			}
		}
	}
	return &p, nil
}
