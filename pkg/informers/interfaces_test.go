package informers_test

import (
	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/informers"
)

// The informers are the controller's Observer and the loop is their
// Notifier.
var (
	_ controller.Observer = (*informers.Informers)(nil)
	_ informers.Notifier  = (*eventloop.Loop)(nil)
)
