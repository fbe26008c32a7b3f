package isolation

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Samples is one scrape of the operator's /metrics: each series, written
// as the exposition format writes it (name{label="value",...}), and its
// value.
type Samples map[string]float64

// ParseMetrics reads the Prometheus text exposition format. Only what
// promhttp writes is handled: comments, and one sample per line with no
// timestamp.
func ParseMetrics(r io.Reader) (Samples, error) {
	out := Samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// Get returns a series' value, 0 when absent.
func (s Samples) Get(series string) float64 { return s[series] }

// Sum adds the values of every series of metric name whose labels contain
// each of labels (`step="ensure"`), e.g. the _count of a histogram over
// all its label values.
func (s Samples) Sum(name string, labels ...string) float64 {
	total := 0.0
	for k, v := range s {
		base, lbls, _ := strings.Cut(k, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lbls, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// LabelValues returns the values label takes in the series of metric name,
// sorted.
func (s Samples) LabelValues(name, label string) []string {
	seen := map[string]bool{}
	prefix := label + `="`
	for k := range s {
		base, lbls, ok := strings.Cut(k, "{")
		if !ok || base != name {
			continue
		}
		for part := range strings.SplitSeq(strings.TrimSuffix(lbls, "}"), ",") {
			if v, ok := strings.CutPrefix(part, prefix); ok {
				seen[strings.TrimSuffix(v, `"`)] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// Delta is what changed between two scrapes of counters and histograms.
func Delta(before, after Samples) Samples {
	out := Samples{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// scraper reads the operator's /metrics.
type scraper struct {
	url    string
	client *http.Client
}

func newScraper(addr string) *scraper {
	return &scraper{url: "http://" + addr + "/metrics", client: &http.Client{Timeout: 10 * time.Second}}
}

func (s *scraper) scrape(ctx context.Context) (Samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", s.url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}
