package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Names of the API, kept as constants so informers, RBAC and tests spell
// them one way.
const (
	// GroupName is the API group of every pgloop resource.
	GroupName = "pgloop.dev"
	// Version is the API version these types serve.
	Version = "v1"
	// PostgresqlKind is the kind of a cluster resource.
	PostgresqlKind = "Postgresql"
	// PostgresqlListKind is the kind of a list of clusters.
	PostgresqlListKind = "PostgresqlList"
	// PostgresqlResource is the plural resource name used in URLs and RBAC
	// rules.
	PostgresqlResource = "postgresqls"
	// PostgresqlSingular is the singular resource name kubectl accepts.
	PostgresqlSingular = "postgresql"
	// PostgresqlShortName is the short name kubectl accepts
	// (`kubectl get pg`).
	PostgresqlShortName = "pg"
)

// SchemeGroupVersion is the group and version of these types, used to
// register them and to build REST clients.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// SchemeGroupVersionKind is the GroupVersionKind of Postgresql, for owner
// references and dynamic clients.
var SchemeGroupVersionKind = SchemeGroupVersion.WithKind(PostgresqlKind)

// SchemeGroupVersionResource is the GroupVersionResource of postgresqls, for
// dynamic clients and informers.
var SchemeGroupVersionResource = SchemeGroupVersion.WithResource(PostgresqlResource)

var (
	// SchemeBuilder collects the functions that add these types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds these types to a scheme, so clients and codecs can
	// encode and decode them.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind takes an unqualified kind and returns a group-qualified GroupKind, as
// apimachinery's error helpers expect.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource takes an unqualified resource and returns a group-qualified
// GroupResource, as apierrors.NewNotFound and friends expect.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&Postgresql{},
		&PostgresqlList{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
