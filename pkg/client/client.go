// Package client is a small typed client for pgloop's Postgresql resources,
// on client-go's REST client: what informers (list, watch), effects (get,
// update, status) and the CLI need, without generated clientsets.
package client

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Scheme knows the built-in types and pgloop's, for codecs and event
// recorders.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// Interface is what callers use, so tests can substitute it.
type Interface interface {
	Get(ctx context.Context, namespace, name string) (*v1.Postgresql, error)
	List(ctx context.Context, namespace string, opts metav1.ListOptions) (*v1.PostgresqlList, error)
	Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error)
	Create(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error)
	Update(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error)
	UpdateStatus(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error)
	Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error
}

// Client implements Interface against an API server.
type Client struct {
	rest rest.Interface
}

var _ Interface = (*Client)(nil)

// New returns a Client for cfg (which it does not modify).
func New(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = serializer.NewCodecFactory(Scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("while building the pgloop.dev REST client: %w", err)
	}
	return &Client{rest: rc}, nil
}

// NewForREST wraps an existing REST client (tests use a fake one).
func NewForREST(rc rest.Interface) *Client { return &Client{rest: rc} }

func (c *Client) Get(ctx context.Context, namespace, name string) (*v1.Postgresql, error) {
	out := &v1.Postgresql{}
	err := c.rest.Get().Namespace(namespace).Resource(v1.PostgresqlResource).Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) List(ctx context.Context, namespace string, opts metav1.ListOptions) (*v1.PostgresqlList, error) {
	out := &v1.PostgresqlList{}
	err := c.rest.Get().Namespace(namespace).Resource(v1.PostgresqlResource).
		VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Watch(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.rest.Get().Namespace(namespace).Resource(v1.PostgresqlResource).
		VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

func (c *Client) Create(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error) {
	out := &v1.Postgresql{}
	err := c.rest.Post().Namespace(pg.Namespace).Resource(v1.PostgresqlResource).Body(pg).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Update(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error) {
	out := &v1.Postgresql{}
	err := c.rest.Put().Namespace(pg.Namespace).Resource(v1.PostgresqlResource).Name(pg.Name).Body(pg).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus writes pg.Status through the status subresource; the
// resourceVersion must be current, or the API answers Conflict.
func (c *Client) UpdateStatus(ctx context.Context, pg *v1.Postgresql) (*v1.Postgresql, error) {
	out := &v1.Postgresql{}
	err := c.rest.Put().Namespace(pg.Namespace).Resource(v1.PostgresqlResource).Name(pg.Name).
		SubResource("status").Body(pg).Do(ctx).Into(out)
	return out, err
}

func (c *Client) Delete(ctx context.Context, namespace, name string, opts metav1.DeleteOptions) error {
	return c.rest.Delete().Namespace(namespace).Resource(v1.PostgresqlResource).Name(name).Body(&opts).Do(ctx).Error()
}
