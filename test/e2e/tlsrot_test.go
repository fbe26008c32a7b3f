package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/cluster"
)

// testCA is a certificate authority made by the test, and the server
// certificates it signs.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pgloop e2e CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// server returns a PEM certificate for dnsName, with serial number serial,
// and its PEM key.
func (ca *testCA) server(t testing.TB, dnsName string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// poolerCertificate is servedCertificate through a pooler pod (simple
// protocol), asked again until the pooler serves: a Ready pooler accepts
// TCP, but its first client can wait past connect_timeout (connectPooler
// says why). A certificate that does not verify ends it at once.
func poolerCertificate(ctx context.Context, ip, serverName string, ca *testCA, user, pw, db string) (*big.Int, error) {
	var serial *big.Int
	err := Eventually(ctx, "a TLS connection through the pooler at "+ip, func(ctx context.Context) (bool, error) {
		s, err := servedCertificate(ctx, ip, serverName, ca, user, pw, db, true)
		var unknown x509.UnknownAuthorityError
		var invalid x509.CertificateInvalidError
		var host x509.HostnameError
		switch {
		case errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host):
			return false, fmt.Errorf("%w: %w", errStop, err)
		case err != nil:
			return false, err
		}
		serial = s
		return true, nil
	})
	return serial, err
}

// servedCertificate connects to ip:5432 as user with password, TLS
// verified as sslmode=verify-full does (the CA's roots, serverName as the
// name to check), and returns the serial number of the certificate the
// server presented.
func servedCertificate(ctx context.Context, ip, serverName string, ca *testCA, user, pw, db string, simple bool) (*big.Int, error) {
	extra := ""
	if simple {
		extra = " default_query_exec_mode=simple_protocol"
	}
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d dbname=%s sslmode=verify-full connect_timeout=5%s", ip, cluster.PostgresPort, db, extra))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	cfg.User, cfg.Password = user, pw
	cfg.TLSConfig = &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	cfg.Fallbacks = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	tc, ok := conn.PgConn().Conn().(*tls.Conn)
	if !ok {
		return nil, fmt.Errorf("the connection to %s is not TLS (%T)", ip, conn.PgConn().Conn())
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return nil, err
	}
	return tc.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// TestTLSCustomCertificate runs zalando's spec.tls on real PostgreSQL and
// PgBouncer: a CA and a server certificate made here, in a Secret; the
// cluster mounts it and both serve it to a client verifying it
// (verify-full); then the Secret's certificate is replaced, which, as with
// zalando, rolls nothing: the running processes keep the certificate they
// read until they restart, and a re-created pod serves the new one.
func TestTLSCustomCertificate(t *testing.T) {
	ns := env.Namespace(t)
	env.StartOperator(t, "tls", []string{ns})
	ctx := Context(t, 12*time.Minute)
	const name, secret = "tlsdb", "tlsdb-cert"
	serverName := fmt.Sprintf("%s.%s.svc", name, ns)

	ca := newTestCA(t)
	certPEM, keyPEM := ca.server(t, serverName, 100)
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": ca.pem},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	env.CreateCluster(t, ns, name, 1, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {}}
		pg.Spec.Databases = map[string]string{"appdb": "app"}
		pg.Spec.EnableConnectionPooler = ptr.To(true)
		pg.Spec.ConnectionPooler = &v1.ConnectionPooler{NumberOfInstances: ptr.To[int32](1)}
		pg.Spec.TLS = &v1.TLS{SecretName: secret, CAFile: "ca.crt"}
	})
	pg := inEffect(ctx, t, ns, name, 1)
	t.Logf("Running with the pooler ready after %v", time.Since(began).Round(time.Millisecond))
	primary := env.Pod(ctx, t, ns, pg.Status.Primary)

	t.Run("the objects mount the Secret and name its files", func(t *testing.T) {
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkTLSPod(t, "statefulset", sts.Spec.Template.Spec, cluster.ContainerName, secret, map[string]string{
			"SSL_CERTIFICATE_FILE": "/tls/tls.crt", "SSL_PRIVATE_KEY_FILE": "/tls/tls.key", "SSL_CA_FILE": "/tls/ca.crt"})
		d, err := env.Kube.AppsV1().Deployments(ns).Get(ctx, cluster.PoolerName(name, cluster.RoleMaster), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkTLSPod(t, "pooler deployment", d.Spec.Template.Spec, cluster.PoolerContainerName, secret, map[string]string{
			"CONNECTION_POOLER_CLIENT_TLS_CRT": "/tls/tls.crt", "CONNECTION_POOLER_CLIENT_TLS_KEY": "/tls/tls.key",
			"CONNECTION_POOLER_CLIENT_CA_FILE": "/tls/ca.crt"})
		if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.FSGroup == nil || *sc.FSGroup != 103 {
			t.Errorf("pooler deployment: pod securityContext %+v, want fsGroup 103", sc)
		}
	})

	t.Run("the kubelet mounted the key 0640, readable by PostgreSQL's group", func(t *testing.T) {
		// A Secret's files are links into its ..data directory: -L
		// reads the file's own mode and group.
		out, err := env.Exec(ctx, primary, cluster.ContainerName, "stat", "-L", "-c", "%a %g", "/tls/tls.key")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != "640 103" {
			t.Errorf("/tls/tls.key in %s: mode and group %q, want \"640 103\"", primary.Name, got)
		}
	})

	appPW := password(ctx, t, ns, cluster.SecretName("app", name))
	t.Run("PostgreSQL serves the Secret's certificate", func(t *testing.T) {
		var settings string
		if err := env.SQL(ctx, t, primary).QueryRow(ctx,
			"SELECT current_setting('ssl') || ' ' || current_setting('ssl_cert_file') || ' ' || current_setting('ssl_ca_file')").Scan(&settings); err != nil {
			t.Fatal(err)
		}
		t.Logf("the primary's ssl, ssl_cert_file, ssl_ca_file: %s", settings)
		serial, err := servedCertificate(ctx, primary.Status.PodIP, serverName, ca, "app", appPW, "appdb", false)
		if err != nil {
			t.Fatalf("verify-full to PostgreSQL on %s as %s: %v", primary.Status.PodIP, serverName, err)
		}
		if serial.Int64() != 100 {
			t.Errorf("PostgreSQL served certificate serial %v, want the Secret's (100)", serial)
		}
	})

	poolerPod := func(t *testing.T) *corev1.Pod {
		pods, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, cluster.RoleMaster), ReadyPods(1))
		if err != nil {
			t.Fatal(err)
		}
		return pods[0]
	}
	t.Run("the pooler serves the Secret's certificate", func(t *testing.T) {
		p := poolerPod(t)
		serial, err := poolerCertificate(ctx, p.Status.PodIP, serverName, ca, "app", appPW, "appdb")
		if err != nil {
			t.Fatalf("verify-full to the pooler on %s as %s: %v", p.Status.PodIP, serverName, err)
		}
		if serial.Int64() != 100 {
			t.Errorf("the pooler served certificate serial %v, want the Secret's (100)", serial)
		}
	})

	t.Run("a new certificate in the Secret rolls nothing; a new pod serves it", func(t *testing.T) {
		before := podUIDs(ctx, t, ns, name)
		sts, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM := ca.server(t, serverName, 200)
		s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data["tls.crt"], s.Data["tls.key"] = certPEM, keyPEM
		if _, err := env.Kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// A sync the operator would run on the change has run once the
		// cluster is observed again: ask for one and wait for it.
		req := time.Now().UTC().Format(time.RFC3339Nano)
		if _, err := env.MergePatchCluster(ctx, ns, name, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1.AnnotationSyncRequestedAt, req)); err != nil {
			t.Fatal(err)
		}
		if _, err := env.WaitCluster(ctx, ns, name, "the sync request handled", func(pg *v1.Postgresql) bool {
			return pg.Status.Database != nil && pg.Status.Database.SyncRequest == req
		}); err != nil {
			t.Fatal(err)
		}
		after, err := env.Kube.AppsV1().StatefulSets(ns).Get(ctx, cluster.StatefulSetName(name), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.Generation != sts.Generation {
			t.Errorf("statefulset generation %d -> %d: the template changed", sts.Generation, after.Generation)
		}
		if got := podUIDs(ctx, t, ns, name); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("pods %v -> %v: a rollout", before, got)
		}
		serial, err := servedCertificate(ctx, primary.Status.PodIP, serverName, ca, "app", appPW, "appdb", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the running PostgreSQL serves serial %v after the Secret's change (it reads its files at start and reload)", serial)
		if serial.Int64() != 100 {
			t.Errorf("serial %v: want the old one (100) until the server restarts", serial)
		}

		// The pooler pod re-created by its Deployment reads the new
		// files.
		old := poolerPod(t)
		if err := env.Kube.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		pods, err := env.WaitPodsSelected(ctx, ns, cluster.PoolerSelector(name, cluster.RoleMaster), func(pods []*corev1.Pod) bool {
			return len(pods) == 1 && pods[0].UID != old.UID && ReadyPods(1)(pods)
		})
		if err != nil {
			t.Fatal(err)
		}
		serial, err = poolerCertificate(ctx, pods[0].Status.PodIP, serverName, ca, "app", appPW, "appdb")
		if err != nil {
			t.Fatal(err)
		}
		if serial.Int64() != 200 {
			t.Errorf("the new pooler pod serves serial %v, want the new certificate's (200)", serial)
		}
	})
}

// checkTLSPod checks a pod template mounts secret at /tls with mode 0640
// and gives container the variables want.
func checkTLSPod(t *testing.T, what string, spec corev1.PodSpec, container, secret string, want map[string]string) {
	t.Helper()
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if s := spec.Volumes[i].Secret; s != nil && s.SecretName == secret {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil {
		t.Fatalf("%s: no volume of Secret %s in %+v", what, secret, spec.Volumes)
	}
	if m := vol.Secret.DefaultMode; m == nil || *m != 0o640 {
		t.Errorf("%s: volume %s defaultMode %v, want 0640", what, vol.Name, m)
	}
	for _, c := range spec.Containers {
		if c.Name != container {
			continue
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || (m.Name == vol.Name && m.MountPath == "/tls" && m.ReadOnly)
		}
		if !mounted {
			t.Errorf("%s: container %s does not mount %s read-only at /tls: %+v", what, c.Name, vol.Name, c.VolumeMounts)
		}
		got := map[string]string{}
		for _, e := range c.Env {
			got[e.Name] = e.Value
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: container %s: %s=%q, want %q", what, c.Name, k, got[k], v)
			}
		}
		return
	}
	t.Errorf("%s: no container %s", what, container)
}

// rotationEvents counts the Events of reason recorded on cluster name.
func rotationEvents(ctx context.Context, t testing.TB, ns, name, reason string) int {
	t.Helper()
	list, err := env.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range list.Items {
		n += int(max(e.Count, 1))
	}
	return n
}

// secretData reads a Secret's data and annotations.
func secretData(ctx context.Context, t testing.TB, ns, name string) (map[string]string, map[string]string) {
	t.Helper()
	s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, s.Annotations
}

// TestPasswordRotationScheduled runs zalando's scheduled password rotation
// on real PostgreSQL, with a 45 s interval (--password-rotation-interval)
// and a retention of the roles made of twice that: usersWithSecretRotation
// gets a new role each time, a member of the user, that its Secret then
// names, while the former credentials still log in until a later rotation
// drops that role past its retention; usersWithInPlaceSecretRotation gets a
// new password for itself, the old one refused at once. Status shows the
// next rotation and the last one, Events say so, and an operator restarted
// between two rotations does not rotate again before the date status
// holds.
func TestPasswordRotationScheduled(t *testing.T) {
	t.Parallel() // waits on timers: docs/testbed.md, "Suites run concurrently"
	ns := env.Namespace(t)
	const interval = 45 * time.Second
	// A retention of 1m is raised to twice the interval, 90 s.
	flags := []string{"--password-rotation-interval=" + interval.String(), "--password-rotation-user-retention=1m"}
	first := env.StartOperator(t, "rotation", []string{ns}, flags...)
	ctx := Context(t, 15*time.Minute)
	const name = "rot"

	env.CreateCluster(t, ns, name, 1, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {}, "flyway": {}, "other": {}}
		pg.Spec.Databases = map[string]string{"appdb": "app"}
		pg.Spec.UsersWithSecretRotation = []string{"app"}
		pg.Spec.UsersWithInPlaceSecretRotation = []string{"flyway"}
	})
	pg := inEffect(ctx, t, ns, name, 1)
	primary := pg.Status.Primary
	appSecret, flywaySecret, otherSecret := cluster.SecretName("app", name), cluster.SecretName("flyway", name), cluster.SecretName("other", name)
	app0, _ := secretData(ctx, t, ns, appSecret)
	flyway0, _ := secretData(ctx, t, ns, flywaySecret)
	other0, _ := secretData(ctx, t, ns, otherSecret)

	pg, err := env.WaitCluster(ctx, ns, name, "a next rotation in status", func(pg *v1.Postgresql) bool {
		r := pg.Status.PasswordRotation
		return r != nil && r.NextRotation != nil
	})
	if err != nil {
		t.Fatal(err)
	}
	next1 := pg.Status.PasswordRotation.NextRotation.Time
	t.Logf("status.passwordRotation.nextRotation %s (%v from now)", next1.UTC().Format(time.RFC3339), time.Until(next1).Round(time.Second))

	finished := func(after string) func(pg *v1.Postgresql) bool {
		return func(pg *v1.Postgresql) bool {
			r := pg.Status.PasswordRotation
			return r != nil && r.Last != nil && r.Last.ID != after && r.Last.FinishedAt != nil
		}
	}
	pg, err = env.WaitCluster(ctx, ns, name, "the first rotation finished", finished(""))
	if err != nil {
		t.Fatal(err)
	}
	rot1 := *pg.Status.PasswordRotation.Last
	t.Logf("rotation %s: started %s (due %s), finished %s; users %+v; next %s", rot1.ID, rot1.StartedAt.UTC().Format(time.RFC3339),
		next1.UTC().Format(time.RFC3339), rot1.FinishedAt.UTC().Format(time.RFC3339), rot1.Users,
		pg.Status.PasswordRotation.NextRotation.UTC().Format(time.RFC3339))
	if rot1.StartedAt.Time.Before(next1) {
		t.Errorf("the rotation started at %v, before its date %v", rot1.StartedAt, next1)
	}
	role1 := v1.RotationRoleName("app", rot1.StartedAt.Time, interval)

	t.Run("new role for app, the old credentials still log in", func(t *testing.T) {
		app1, ann := secretData(ctx, t, ns, appSecret)
		if app1["username"] != role1 || app1["password"] == app0["password"] {
			t.Fatalf("app's Secret: username %q (want %q), password changed %v", app1["username"], role1, app1["password"] != app0["password"])
		}
		if ann[v1.AnnotationPasswordRotated] != rot1.ID {
			t.Errorf("app's Secret: %s=%q, want %q", v1.AnnotationPasswordRotated, ann[v1.AnnotationPasswordRotated], rot1.ID)
		}
		if want := pg.Status.PasswordRotation.NextRotation.UTC().Format(time.RFC3339); app1[v1.SecretNextRotationKey] != want {
			t.Errorf("app's Secret: nextRotation %q, want %q", app1[v1.SecretNextRotationKey], want)
		}
		conn, err := connect(ctx, ns, primary, app1["username"], app1["password"], "appdb")
		if err != nil {
			t.Fatalf("the new credentials (%s): %v", app1["username"], err)
		}
		defer conn.Close(context.Background())
		var member bool
		if err := conn.QueryRow(ctx, "SELECT pg_has_role(current_user, 'app', 'MEMBER')").Scan(&member); err != nil || !member {
			t.Errorf("%s a member of app: %v %v", role1, member, err)
		}
		if err := login(ctx, ns, primary, "app", app0["password"], "appdb"); err != nil {
			t.Errorf("the old credentials (app): %v", err)
		}
	})

	t.Run("in place for flyway, the old password refused", func(t *testing.T) {
		flyway1, _ := secretData(ctx, t, ns, flywaySecret)
		if flyway1["username"] != "flyway" || flyway1["password"] == flyway0["password"] {
			t.Fatalf("flyway's Secret: username %q, password changed %v", flyway1["username"], flyway1["password"] != flyway0["password"])
		}
		if err := login(ctx, ns, primary, "flyway", flyway1["password"], "postgres"); err != nil {
			t.Errorf("flyway's new password: %v", err)
		}
		if err := login(ctx, ns, primary, "flyway", flyway0["password"], "postgres"); !isAuthFailure(err) {
			t.Errorf("flyway's old password: %v, want an authentication failure", err)
		}
	})

	t.Run("a user in no list is not rotated", func(t *testing.T) {
		other1, ann := secretData(ctx, t, ns, otherSecret)
		if other1["password"] != other0["password"] || ann[v1.AnnotationPasswordRotated] != "" {
			t.Errorf("other's Secret changed: %v", ann)
		}
	})

	t.Run("a restarted operator waits for the date in status", func(t *testing.T) {
		due := pg.Status.PasswordRotation.NextRotation.Time
		app1, _ := secretData(ctx, t, ns, appSecret)
		if err := first.Stop(); err != nil {
			t.Fatal(err)
		}
		second := env.StartOperator(t, "rotation-2", []string{ns}, flags...)
		if err := second.WaitLog(ctx, fmt.Sprintf("cluster=%s/%s", ns, name)); err != nil {
			t.Fatal(err)
		}
		pg, err := env.WaitCluster(ctx, ns, name, "the second rotation finished", finished(rot1.ID))
		if err != nil {
			t.Fatal(err)
		}
		rot2 := *pg.Status.PasswordRotation.Last
		t.Logf("rotation %s after the restart: started %s, due %s", rot2.ID, rot2.StartedAt.UTC().Format(time.RFC3339), due.UTC().Format(time.RFC3339))
		if rot2.StartedAt.Time.Before(due) {
			t.Errorf("the second rotation started at %v, before its date %v", rot2.StartedAt, due)
		}
		if n := rotationEvents(ctx, t, ns, name, "PasswordRotationStarted"); n != 2 {
			t.Errorf("%d PasswordRotationStarted Events, want 2", n)
		}
		// The first rotation's role still logs in: its retention (2 x
		// 45 s) has not passed at the second rotation.
		if err := login(ctx, ns, primary, app1["username"], app1["password"], "appdb"); err != nil {
			t.Errorf("the first rotation's credentials (%s) after the second: %v", app1["username"], err)
		}

		// The third drops the first rotation's role.
		pg, err = env.WaitCluster(ctx, ns, name, "the rotation dropping "+role1+" finished", func(pg *v1.Postgresql) bool {
			r := pg.Status.PasswordRotation
			return r != nil && r.Last != nil && r.Last.FinishedAt != nil && slices.Contains(r.Last.Drop, role1)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rotation %s dropped %v; roles kept %+v", pg.Status.PasswordRotation.Last.ID, pg.Status.PasswordRotation.Last.Drop, pg.Status.PasswordRotation.Roles)
		if err := login(ctx, ns, primary, app1["username"], app1["password"], "appdb"); err == nil {
			t.Errorf("%s still logs in after its retention", role1)
		}
		app3, _ := secretData(ctx, t, ns, appSecret)
		if err := login(ctx, ns, primary, app3["username"], app3["password"], "appdb"); err != nil {
			t.Errorf("the latest credentials (%s): %v", app3["username"], err)
		}
	})
}

// TestTLSAddedToRunningCluster: spec.tls added to a running cluster of
// two is a pod template change, rolled out as zalando users expect: the
// replica's pod first, a switchover, then the former primary's; every pod
// then serves the Secret's certificate.
func TestTLSAddedToRunningCluster(t *testing.T) {
	ns := env.Namespace(t)
	op := env.StartOperator(t, "tls-roll", []string{ns})
	ctx := Context(t, 12*time.Minute)
	const name, secret = "tlsroll", "tlsroll-cert"
	serverName := fmt.Sprintf("%s.%s.svc", name, ns)
	ca := newTestCA(t)
	certPEM, keyPEM := ca.server(t, serverName, 300)
	if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secret},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.CreateCluster(t, ns, name, 2, OnRealNode, func(pg *v1.Postgresql) {
		pg.Spec.Users = map[string]v1.UserFlags{"app": {}}
		pg.Spec.Databases = map[string]string{"appdb": "app"}
	})
	pg := inEffect(ctx, t, ns, name, 2)
	primary := pg.Status.Primary
	old := podUIDs(ctx, t, ns, name)

	began := time.Now()
	if _, err := env.MergePatchCluster(ctx, ns, name, fmt.Sprintf(`{"spec":{"tls":{"secretName":%q}}}`, secret)); err != nil {
		t.Fatal(err)
	}
	pods, err := env.WaitPods(ctx, ns, name, replacedReady(2, old))
	if err != nil {
		t.Fatal(err)
	}
	pg = inEffect(ctx, t, ns, name, 2)
	t.Logf("both pods replaced and Running %v after the edit; primary %s -> %s", time.Since(began).Round(time.Millisecond), primary, pg.Status.Primary)
	if n := op.LogCount("switched over", "from="+primary); n < 1 {
		t.Errorf("no switchover from %s logged during the rollout", primary)
	}
	appPW := password(ctx, t, ns, cluster.SecretName("app", name))
	for _, p := range pods {
		serial, err := servedCertificate(ctx, p.Status.PodIP, serverName, ca, "app", appPW, "appdb", false)
		if err != nil {
			t.Errorf("pod %s: verify-full: %v", p.Name, err)
			continue
		}
		if serial.Int64() != 300 {
			t.Errorf("pod %s serves serial %v, want the Secret's (300)", p.Name, serial)
		}
	}
}
