package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	helmrelease "helm.sh/helm/v4/pkg/release/v1"
)

// chartVersion is the chart's SemVer for a release's version: v1.2.3 is
// chart 1.2.3 of appVersion v1.2.3, the image's tag.
func chartVersion(version string) string { return strings.TrimPrefix(version, "v") }

// loadChart loads the chart directory dir with the version and appVersion
// of a release stamped in (the repository's Chart.yaml holds 0.0.0-dev and
// latest), and every file's time set to modTime, so that a release of the
// same commit makes the same package.
func loadChart(dir, version string, modTime time.Time) (*chart.Chart, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	ch.Metadata.Version = chartVersion(version)
	ch.Metadata.AppVersion = version
	if err := ch.Validate(); err != nil {
		return nil, fmt.Errorf("chart %s as version %s: %w", dir, version, err)
	}
	ch.StampModTimes(modTime)
	return ch, nil
}

// packageChart writes the chart of dir as version into outDir, as `helm
// package --version --app-version` would, and returns the package's path.
func packageChart(dir, version, outDir string, modTime time.Time) (string, error) {
	ch, err := loadChart(dir, version, modTime)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	path, err := chartutil.Save(ch, outDir)
	if err != nil {
		return "", fmt.Errorf("package chart: %w", err)
	}
	return path, nil
}

// renderChart renders ch as `helm template --include-crds -n namespace`
// does (an install, client-side only) and returns the manifest: the CRDs
// of crds/ and the templates' objects, as YAML documents.
func renderChart(ch *chart.Chart, namespace string, values map[string]any) (string, error) {
	install := action.NewInstall(&action.Configuration{})
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "pgloop"
	install.Namespace = namespace
	install.IncludeCRDs = true
	install.Replace = true
	r, err := install.RunWithContext(context.Background(), ch, values)
	if err != nil {
		return "", fmt.Errorf("render chart: %w", err)
	}
	rel, ok := r.(*helmrelease.Release)
	if !ok {
		return "", errors.New("render chart: not a v1 release")
	}
	return rel.Manifest, nil
}
