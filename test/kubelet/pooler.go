package kubelet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// PoolerContainer is the name of the container of a connection-pooler pod,
// as the zalando operator and pgloop name it. A pod whose container to run
// (runContainer: "postgres", else the first) has this name runs PgBouncer
// instead of Patroni.
const PoolerContainer = "connection-pooler"

// DefaultPgBouncer is Debian's pgbouncer (`make data-plane-deps`).
const DefaultPgBouncer = "/usr/sbin/pgbouncer"

// Files of a pooler pod, in its directory <root>/pods/<uid>/.
const (
	poolerConfigFile = "pgbouncer.ini"
	poolerAuthFile   = "auth_file.txt"
	poolerCertFile   = "pgbouncer.crt"
	poolerKeyFile    = "pgbouncer.key"
	poolerLogFile    = "pgbouncer.log"
)

// isPooler reports whether the kubelet runs pod's container as a
// connection pooler (PgBouncer) rather than as Spilo (Patroni).
func isPooler(pod *corev1.Pod) bool {
	c := runContainer(pod)
	return c != nil && c.Name == PoolerContainer
}

// PoolerSettings is what the connection-pooler image reads from its
// environment (its entrypoint fills pgbouncer.ini.tmpl with envsubst).
type PoolerSettings struct {
	// Service is PGHOST: the name of the master or replica Service of the
	// cluster, in the pod's namespace. There is no DNS here: the kubelet
	// resolves it to an address itself (ServiceUpstreams).
	Service string
	// Port is PGPORT, the Service's port.
	Port int
	// User and Schema are PGUSER and PGSCHEMA: the role PgBouncer logs in
	// as to look users up with Schema.user_lookup($1). Password is
	// PGPASSWORD, the User's.
	User, Schema, Password string
	// ListenPort is CONNECTION_POOLER_PORT.
	ListenPort int
	// Mode is CONNECTION_POOLER_MODE: "session" or "transaction".
	Mode string
	// The CONNECTION_POOLER_*_SIZE and _CONN numbers. MinSize is read
	// and checked, but not written: the image leaves min_pool_size
	// commented out.
	DefaultSize, MinSize, ReserveSize, MaxClientConn, MaxDBConn int
}

// identifier is what PGUSER and PGSCHEMA may be: they are written unquoted
// into a connection string and an SQL query.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParsePoolerSettings reads the settings from a resolved environment
// (ResolveEnv). Every variable of the pod contract must be there: the
// image's envsubst would leave an empty value that PgBouncer refuses.
func ParsePoolerSettings(env map[string]string) (PoolerSettings, error) {
	var s PoolerSettings
	var missing, errs []error
	str := func(name string) string {
		v, ok := env[name]
		if !ok || v == "" {
			missing = append(missing, errors.New(name))
		}
		return v
	}
	num := func(name string, lowest int) int {
		v := str(name)
		if v == "" {
			return 0
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lowest {
			errs = append(errs, fmt.Errorf("%s=%q is not a whole number of at least %d", name, v, lowest))
		}
		return n
	}
	s.Service = str("PGHOST")
	s.Port = num("PGPORT", 1)
	s.User = str("PGUSER")
	s.Schema = str("PGSCHEMA")
	s.Password = str("PGPASSWORD")
	s.ListenPort = num("CONNECTION_POOLER_PORT", 1)
	s.Mode = str("CONNECTION_POOLER_MODE")
	s.DefaultSize = num("CONNECTION_POOLER_DEFAULT_SIZE", 1)
	s.MinSize = num("CONNECTION_POOLER_MIN_SIZE", 0)
	s.ReserveSize = num("CONNECTION_POOLER_RESERVE_SIZE", 0)
	s.MaxClientConn = num("CONNECTION_POOLER_MAX_CLIENT_CONN", 1)
	s.MaxDBConn = num("CONNECTION_POOLER_MAX_DB_CONN", 0)
	if len(missing) > 0 {
		return s, fmt.Errorf("the connection pooler needs %v, unset or empty", errors.Join(missing...))
	}
	if s.Port > 65535 || s.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("PGPORT %d or CONNECTION_POOLER_PORT %d is not a port", s.Port, s.ListenPort))
	}
	if s.Mode != "session" && s.Mode != "transaction" {
		errs = append(errs, fmt.Errorf("CONNECTION_POOLER_MODE=%q: want session or transaction", s.Mode))
	}
	for name, v := range map[string]string{"PGUSER": s.User, "PGSCHEMA": s.Schema} {
		if !identifier.MatchString(v) {
			errs = append(errs, fmt.Errorf("%s=%q: want a plain identifier (letters, digits, _)", name, v))
		}
	}
	if strings.ContainsAny(s.Service, " \t\n'\"=") {
		errs = append(errs, fmt.Errorf("PGHOST=%q is not a Service name", s.Service))
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return s, errors.Join(errs...)
}

// PoolerHost is where the pooler runs on this machine.
type PoolerHost struct {
	// PodIP is the address PgBouncer listens on.
	PodIP string
	// Upstream is the address the Service resolved to.
	Upstream Upstream
	// Dir holds the auth file, the certificate and its key.
	Dir string
	// CertFile, KeyFile and CAFile are the host's files of
	// CONNECTION_POOLER_CLIENT_TLS_CRT, _KEY and CONNECTION_POOLER_CLIENT_CA_FILE
	// (spec.tls's Secret): PgBouncer serves them to its clients instead of
	// the certificate at Dir, as the image's entrypoint links them.
	CertFile, KeyFile, CAFile string
}

// PgBouncerConfig returns pgbouncer.ini and its auth file for the settings:
// the image's pgbouncer.ini.tmpl, translated to this machine:
//
//  1. [databases] names the upstream's address, not the Service: no DNS.
//  2. PgBouncer listens on the pod IP only, and on no unix socket (every
//     pooler listens on the same port: their sockets would collide).
//  3. server_tls_sslmode is prefer, not require: the process node's
//     PostgreSQL has no TLS (spilo.go drops ssl, as it has no certificate).
//  4. Left out: logfile and pidfile (its output goes to pgbouncer.log in
//     the pod's directory, through the kubelet), stats_users_prefix (a
//     patch of the image's PgBouncer, unknown to Debian's), auth_dbname
//     (PgBouncer 1.19; Debian 12 has 1.18, where auth_query runs in the
//     database the client asks for), server_tls_ca_file (unused without
//     verification).
//
// Client TLS is required, with the pod's certificate (h.CertFile, from
// spec.tls) or else the one the kubelet generates at Dir (SelfSignedCert),
// as the image's entrypoint does with openssl.
func PgBouncerConfig(s PoolerSettings, h PoolerHost) (ini, authFile []byte) {
	db := fmt.Sprintf("host=%s port=%d auth_user=%s", h.Upstream.Addr, h.Upstream.Port, s.User)
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("; Written by the process kubelet from the pod's environment, after the")
	line("; connection-pooler image's pgbouncer.ini.tmpl (docs/testbed.md, \"Connection pooler pods\").")
	line("; PGHOST=%s resolved to %s:%d.", s.Service, h.Upstream.Addr, h.Upstream.Port)
	line("[databases]")
	line("* = %s", db)
	line("postgres = %s", db)
	line("")
	line("[pgbouncer]")
	line("pool_mode = %s", s.Mode)
	line("listen_addr = %s", h.PodIP)
	line("listen_port = %d", s.ListenPort)
	line("unix_socket_dir =")
	line("auth_type = md5")
	line("auth_file = %s/%s", h.Dir, poolerAuthFile)
	line("admin_users = %s", s.User)
	line("auth_query = SELECT * FROM %s.user_lookup($1)", s.Schema)
	line("")
	line("server_tls_sslmode = prefer")
	line("server_tls_protocols = secure")
	line("client_tls_sslmode = require")
	if h.CertFile != "" && h.KeyFile != "" {
		line("client_tls_key_file = %s", h.KeyFile)
		line("client_tls_cert_file = %s", h.CertFile)
		if h.CAFile != "" {
			line("client_tls_ca_file = %s", h.CAFile)
		}
	} else {
		line("client_tls_key_file = %s/%s", h.Dir, poolerKeyFile)
		line("client_tls_cert_file = %s/%s", h.Dir, poolerCertFile)
	}
	line("")
	line("log_connections = 0")
	line("log_disconnections = 0")
	line("default_pool_size = %d", s.DefaultSize)
	line("reserve_pool_size = %d", s.ReserveSize)
	line("max_client_conn = %d", s.MaxClientConn)
	line("max_db_connections = %d", s.MaxDBConn)
	line("idle_transaction_timeout = 600")
	line("server_login_retry = 5")
	line("ignore_startup_parameters = extra_float_digits,options")
	return []byte(b.String()), []byte(authLine(s.User, s.Password))
}

// authLine is one line of PgBouncer's auth file: both fields in double
// quotes, a double quote inside doubled.
func authLine(user, password string) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return q(user) + " " + q(password) + "\n"
}

// SelfSignedCert returns a PEM certificate and key for PgBouncer's client
// TLS, valid for a year for the pod's name and IP. Clients connect with
// sslmode=require, which does not verify it.
func SelfSignedCert(name string, ip netip.Addr, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip.IsValid() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// Upstream is one address a Service routes to.
type Upstream struct {
	Addr string
	Port int
}

func (u Upstream) String() string { return fmt.Sprintf("%s:%d", u.Addr, u.Port) }

// ServiceUpstreams returns the ready addresses of svc for its port port,
// sorted, as kube-proxy would route to them:
//
//  1. the ready endpoints of its EndpointSlices, when any has one (a plane
//     whose pod IPs are not loopback, or a Service without a selector whose
//     slices someone writes);
//  2. else, for a Service with a selector, the pods of its namespace the
//     selector matches that are Ready, have an IP and are not terminating:
//     what the EndpointSlice controller would publish, which it cannot
//     here (the apiserver refuses loopback addresses in EndpointSlices).
//
// A named targetPort is looked up in the pod's container ports; one that
// is not found leaves the pod out, as the controller does.
func ServiceUpstreams(svc *corev1.Service, port int, endpointSlices []*discoveryv1.EndpointSlice, pods []*corev1.Pod) ([]Upstream, error) {
	var sp *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if int(svc.Spec.Ports[i].Port) == port {
			sp = &svc.Spec.Ports[i]
		}
	}
	if sp == nil {
		return nil, fmt.Errorf("service %s/%s has no port %d", svc.Namespace, svc.Name, port)
	}
	var out []Upstream
	for _, es := range endpointSlices {
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		target := 0
		for _, p := range es.Ports {
			if p.Port != nil && ptrOr(p.Name, "") == sp.Name {
				target = int(*p.Port)
			}
		}
		if target == 0 {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, Upstream{Addr: a, Port: target})
			}
		}
	}
	if len(out) == 0 && len(svc.Spec.Selector) > 0 {
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		for _, pod := range pods {
			if pod.Namespace != svc.Namespace || !sel.Matches(labels.Set(pod.Labels)) ||
				pod.Status.PodIP == "" || pod.DeletionTimestamp != nil ||
				(!podReady(pod) && !svc.Spec.PublishNotReadyAddresses) {
				continue
			}
			if target := targetPort(sp.TargetPort, int(sp.Port), pod); target > 0 {
				out = append(out, Upstream{Addr: pod.Status.PodIP, Port: target})
			}
		}
	}
	slices.SortFunc(out, func(a, b Upstream) int {
		if c := strings.Compare(a.Addr, b.Addr); c != 0 {
			return c
		}
		return a.Port - b.Port
	})
	return slices.Compact(out), nil
}

// targetPort resolves a Service's targetPort for pod: a number, the
// Service port when unset, or a container port's name; 0 when the name is
// not found.
func targetPort(tp intstr.IntOrString, port int, pod *corev1.Pod) int {
	switch {
	case tp.Type == intstr.String:
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == tp.StrVal {
					return int(p.ContainerPort)
				}
			}
		}
		return 0
	case tp.IntVal > 0:
		return int(tp.IntVal)
	default:
		return port
	}
}

// podReady reports the pod's Ready condition.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// chooseUpstream picks the address PgBouncer connects to: the current one
// while it is still among the ready ones (a replica Service with several
// pods does not make the pooler hop), else the first. ok is false when
// there is none.
func chooseUpstream(current Upstream, ready []Upstream) (Upstream, bool) {
	if len(ready) == 0 {
		return Upstream{}, false
	}
	if slices.Contains(ready, current) {
		return current, true
	}
	return ready[0], true
}

// readinessPort is the port the container's tcpSocket readiness probe
// dials (a number or a container port's name); def when it has none.
func readinessPort(c *corev1.Container, def int) int {
	if c == nil || c.ReadinessProbe == nil || c.ReadinessProbe.TCPSocket == nil {
		return def
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{*c}}}
	if p := targetPort(c.ReadinessProbe.TCPSocket.Port, def, pod); p > 0 {
		return p
	}
	return def
}
