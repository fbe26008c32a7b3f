package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
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
		if base == name && containsAll(lbls, labels) {
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

// Series is one series of a metric: its labels and its value.
type Series struct {
	Labels map[string]string
	Value  float64
}

// Series returns every series of metric name, in no particular order.
func (s Samples) Series(name string) []Series {
	var out []Series
	for k, v := range s {
		base, lbls, _ := strings.Cut(k, "{")
		if base == name {
			out = append(out, Series{Labels: parseLabels(strings.TrimSuffix(lbls, "}")), Value: v})
		}
	}
	return out
}

// parseLabels reads `a="x",b="y"` as the exposition format writes it,
// with \\, \" and \n escaped in values.
func parseLabels(text string) map[string]string {
	out := map[string]string{}
	for text != "" {
		name, rest, ok := strings.Cut(text, `="`)
		if !ok {
			break
		}
		var value strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					value.WriteByte('\n')
					continue
				}
			}
			value.WriteByte(rest[i])
		}
		out[name] = value.String()
		text = strings.TrimPrefix(rest[min(i+1, len(rest)):], ",")
	}
	return out
}

// Delta is what changed between two scrapes of counters and histograms:
// every series of after, less its value in before. Series that did not
// change are kept, at 0, so that a histogram's buckets stay whole.
func Delta(before, after Samples) Samples {
	out := make(Samples, len(after))
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// Quantile estimates the q-quantile (0 < q < 1) of histogram name over the
// series whose labels contain each of labels, from its cumulative _bucket
// series, as Prometheus' histogram_quantile does: linear interpolation
// within the bucket the rank falls in, the lower bound of the first bucket
// taken as 0, and the highest finite bound when the rank falls in +Inf. It
// returns NaN without observations. s is usually a Delta, so the quantile
// is of a window's observations.
func (s Samples) Quantile(name string, q float64, labels ...string) float64 {
	byBound := map[float64]float64{}
	for k, v := range s {
		base, lbls, ok := strings.Cut(k, "{")
		if !ok || base != name+"_bucket" || !containsAll(lbls, labels) {
			continue
		}
		i := strings.Index(lbls, `le="`)
		if i < 0 {
			continue
		}
		le, _, _ := strings.Cut(lbls[i+len(`le="`):], `"`)
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			continue
		}
		byBound[bound] += v
	}
	bounds := make([]float64, 0, len(byBound))
	for b := range byBound {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 || byBound[bounds[len(bounds)-1]] == 0 {
		return math.NaN()
	}
	rank := q * byBound[bounds[len(bounds)-1]]
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		count := byBound[b]
		if count >= rank {
			if math.IsInf(b, 1) {
				return lower
			}
			if count == below {
				return b
			}
			return lower + (b-lower)*(rank-below)/(count-below)
		}
		lower, below = b, count
	}
	return lower
}

// containsAll reports whether the label text lbls holds each of labels.
func containsAll(lbls string, labels []string) bool {
	for _, l := range labels {
		if !strings.Contains(lbls, l) {
			return false
		}
	}
	return true
}

// Scraper reads the operator's /metrics.
type Scraper struct {
	url    string
	client *http.Client
}

// NewScraper reads the /metrics of the health server at addr (host:port).
func NewScraper(addr string) *Scraper {
	return &Scraper{url: "http://" + addr + "/metrics", client: &http.Client{Timeout: 10 * time.Second}}
}

// Scrape reads /metrics once.
func (s *Scraper) Scrape(ctx context.Context) (Samples, error) {
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
