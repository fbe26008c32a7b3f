package status

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Kinds of failure the command tells apart. Callers check them with
// errors.Is; the text of the returned error says what to do.
var (
	// ErrClusterNotFound: the named Postgresql does not exist.
	ErrClusterNotFound = errors.New("cluster not found")
	// ErrCRDNotInstalled: the API server does not serve postgresqls.pgloop.dev.
	ErrCRDNotInstalled = errors.New("crd not installed")
	// ErrForbidden: the user may not read what the command needs.
	ErrForbidden = errors.New("forbidden")
	// ErrUnreachable: no answer from the API server at all.
	ErrUnreachable = errors.New("api server unreachable")
)

// crdName is the CRD's name, as `kubectl get crd` shows it.
const crdName = v1.PostgresqlResource + "." + v1.GroupName

// Error is a failure explained for a user. errors.Is matches both its kind
// (one of the Err variables) and the client's error it came from.
type Error struct {
	Kind error
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error { return []error{e.Kind, e.Err} }

// request is the call that failed: verb and resource as RBAC names them,
// the namespace ("" for all namespaces) and the object's name, if any.
type request struct {
	verb      string
	resource  string // "postgresqls" or "pods"
	group     string // "" for the core group
	namespace string
	name      string
}

func pgRequest(verb, namespace, name string) request {
	return request{verb: verb, resource: v1.PostgresqlResource, group: v1.GroupName, namespace: namespace, name: name}
}

// qualified is the resource as kubectl spells it (postgresqls.pgloop.dev,
// pods).
func (r request) qualified() string {
	if r.group == "" {
		return r.resource
	}
	return r.resource + "." + r.group
}

// scope is where the call was made, for messages.
func (r request) scope() string {
	if r.namespace == "" {
		return "in all namespaces"
	}
	return fmt.Sprintf("in namespace %q", r.namespace)
}

// explain turns a client error into an Error a user can act on. Errors it
// does not recognise come back wrapped with the request.
//  1. Forbidden: which verb on which resource is missing.
//  2. NotFound on a list or watch: the resource type is not served, the CRD
//     is missing. (A NotFound on a get is ambiguous; Detail resolves it.)
//  3. A transport error (url.Error, net.Error): the API is unreachable.
func explain(err error, r request) error {
	if err == nil {
		return nil
	}
	var known *Error
	if errors.As(err, &known) {
		return err
	}
	switch {
	case apierrors.IsForbidden(err):
		what := r.qualified()
		if r.name != "" {
			what += fmt.Sprintf(" %q", r.name)
		}
		hint := fmt.Sprintf("ask for %s on %s", r.verb, r.resource)
		if r.group != "" {
			hint += fmt.Sprintf(" (API group %s)", r.group)
		}
		if r.namespace == "" {
			hint += " in a ClusterRole"
		}
		return &Error{Kind: ErrForbidden, Err: err,
			Msg: fmt.Sprintf("cannot %s %s %s: %s", r.verb, what, r.scope(), hint)}
	case apierrors.IsNotFound(err) && r.name == "" && r.group == v1.GroupName:
		return crdMissing(err)
	}
	if u, ok := unreachable(err); ok {
		return &Error{Kind: ErrUnreachable, Err: err,
			Msg: fmt.Sprintf("cannot reach the Kubernetes API at %s: %v", u.server, u.cause)}
	}
	what := r.qualified()
	if r.name != "" {
		what += " " + r.name
	}
	return fmt.Errorf("%s %s %s: %w", r.verb, what, r.scope(), err)
}

func crdMissing(err error) error {
	return &Error{Kind: ErrCRDNotInstalled, Err: err,
		Msg: fmt.Sprintf("the Postgresql CRD (%s) is not installed in this cluster", crdName)}
}

func clusterNotFound(err error, namespace, name string) error {
	return &Error{Kind: ErrClusterNotFound, Err: err,
		Msg: fmt.Sprintf("%s %s/%s not found", v1.PostgresqlSingular, namespace, name)}
}

type transportFailure struct {
	server string
	cause  error
}

// unreachable recognises the errors client-go returns when no HTTP answer
// came back: a *url.Error around a dial, DNS, TLS or timeout error. An
// answer with a status code is an API error and never a *url.Error.
func unreachable(err error) (transportFailure, bool) {
	var ue *url.Error
	if errors.As(err, &ue) {
		server := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			server = u.Scheme + "://" + u.Host
		}
		return transportFailure{server: server, cause: ue.Err}, true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return transportFailure{server: "(unknown)", cause: err}, true
	}
	return transportFailure{}, false
}
