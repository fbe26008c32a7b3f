package operator

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/sirupsen/logrus"
	"k8s.io/klog/v2"
)

// logTimeFormat is RFC 3339 with milliseconds: a cluster's steps are
// milliseconds apart, and a log in seconds cannot tell their order from
// another cluster's.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

// newLogger returns the operator's logger as cfg asks (cfg is valid).
func newLogger(cfg *Config) *logrus.Logger {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	if cfg.LogOutput != nil {
		log.SetOutput(cfg.LogOutput)
	}
	if cfg.LogFormat == LogFormatJSON {
		log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: logTimeFormat})
	} else {
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true, TimestampFormat: logTimeFormat})
	}
	if level, err := logrus.ParseLevel(cfg.LogLevel); err == nil {
		log.SetLevel(level)
	}
	return log
}

// RedirectKlog sends client-go's logs to a logger configured as cfg says
// (cfg must be valid). klog's logger is process-wide and may not change
// while client-go runs: call it once, when the process starts, before Run.
func RedirectKlog(cfg *Config) {
	klog.SetLogger(logr.New(klogSink{log: logrus.NewEntry(newLogger(cfg)).WithField("component", "client-go")}))
}

// klogSink sends client-go's logs (klog: leader election, reflector and
// watch errors, event broadcaster) to logrus, so that they come in the
// operator's format and level and a JSON log stays parseable line by line.
// klog's verbosity levels map to logrus: 0 is Info, 1 to 3 Debug, more
// Trace. (klog's own -v stays 0, so its V(n) calls made through the legacy
// API are filtered before they get here.)
type klogSink struct {
	log *logrus.Entry
}

var _ logr.LogSink = klogSink{}

func (s klogSink) Init(logr.RuntimeInfo) {}

func (s klogSink) Enabled(level int) bool {
	return s.log.Logger.IsLevelEnabled(klogLevel(level))
}

func (s klogSink) Info(level int, msg string, kv ...any) {
	s.with(kv).Log(klogLevel(level), msg)
}

func (s klogSink) Error(err error, msg string, kv ...any) {
	s.with(kv).WithError(err).Error(msg)
}

func (s klogSink) WithValues(kv ...any) logr.LogSink {
	return klogSink{log: s.with(kv)}
}

func (s klogSink) WithName(name string) logr.LogSink {
	if prev, ok := s.log.Data["logger"].(string); ok && prev != "" {
		name = prev + "/" + name
	}
	return klogSink{log: s.log.WithField("logger", name)}
}

func (s klogSink) with(kv []any) *logrus.Entry {
	if len(kv) == 0 {
		return s.log
	}
	fields := make(logrus.Fields, len(kv)/2+1)
	for i := 0; i < len(kv); i += 2 {
		key, ok := kv[i].(string)
		if !ok {
			key = fmt.Sprint(kv[i])
		}
		if i+1 < len(kv) {
			fields[key] = kv[i+1]
		} else {
			fields[key] = "(MISSING)"
		}
	}
	return s.log.WithFields(fields)
}

func klogLevel(v int) logrus.Level {
	switch {
	case v <= 0:
		return logrus.InfoLevel
	case v <= 3:
		return logrus.DebugLevel
	}
	return logrus.TraceLevel
}
