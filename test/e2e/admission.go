package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgloop/pgloop/test/testbed"
)

// Verdict is what a SlowAdmission answers to one create: after Hold, a
// refusal with Deny as its message, or an admission when Deny is empty.
// The API server gives up on a create held longer than the webhook's
// timeout and fails it.
type Verdict struct {
	Hold time.Duration
	Deny string
}

// SlowAdmission is a validating admission webhook on the test's loopback
// that the plane's API server calls for every create of a Service in one
// namespace: it holds the creates the test asks it to, then admits or
// refuses them. The create of the client (pgloop) waits meanwhile, as it
// does on an API server under load (a burst of 10,000 clusters saw Service
// creates ended by the API server after 60 s: docs/scale.md).
type SlowAdmission struct {
	decide func(name string, attempt int) Verdict

	mu       sync.Mutex
	attempts map[string]int
	held     map[string]int // creates being held now, by Service name
}

// Attempts returns how many creates of the Service name were seen, and
// how many of them are being held now.
func (a *SlowAdmission) Attempts(name string) (seen, held int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.attempts[name], a.held[name]
}

// StartSlowAdmission serves a SlowAdmission for the creates of Services in
// namespace ns, each answered by decide (attempt counts from 1 per name),
// and registers it with the plane's API server for that namespace alone,
// with timeout (whole seconds, 1 to 30) as the webhook's timeout. The
// registration and the server go when the test ends.
func (e *Env) StartSlowAdmission(ctx context.Context, t testing.TB, ns string, timeout time.Duration, decide func(name string, attempt int) Verdict) *SlowAdmission {
	t.Helper()
	a := &SlowAdmission{decide: decide, attempts: map[string]int{}, held: map[string]int{}}
	caPEM, certPEM, keyPEM, err := testbed.ServingCert("pgloop e2e admission " + ns)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	path := "/validate"
	url := "https://" + ln.Addr().String() + path
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	seconds := int32(timeout / time.Second)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "pgloop-e2e-slow-" + ns},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "slow.services.pgloop-e2e.example.com",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"services"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &seconds,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	webhooks := e.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := webhooks.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := webhooks.Delete(ctx, cfg.Name, metav1.DeleteOptions{}); IgnoreNotFound(err) != nil {
			t.Errorf("delete webhook %s: %v", cfg.Name, err)
		}
	})
	return a
}

// serve answers one AdmissionReview.
func (a *SlowAdmission) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	name := review.Request.Name
	a.mu.Lock()
	a.attempts[name]++
	v := a.decide(name, a.attempts[name])
	a.held[name]++
	a.mu.Unlock()
	hold := time.NewTimer(v.Hold)
	select {
	case <-hold.C:
	case <-r.Context().Done():
		hold.Stop()
	}
	a.mu.Lock()
	a.held[name]--
	a.mu.Unlock()
	if errors.Is(r.Context().Err(), context.Canceled) {
		return // the API server gave up on it
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: v.Deny == ""}
	if v.Deny != "" {
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Message: v.Deny, Code: http.StatusServiceUnavailable}
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}
