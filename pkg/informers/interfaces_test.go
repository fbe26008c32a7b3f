package informers_test

import (
	"github.com/pgloop/pgloop/pkg/controller"
	"github.com/pgloop/pgloop/pkg/eventloop"
	"github.com/pgloop/pgloop/pkg/facts"
	"github.com/pgloop/pgloop/pkg/informers"
)

// The informers are what the facts are read from, the facts' Observer is
// the controller's, and the loop is the informers' Notifier.
var (
	_ facts.Reader        = (*informers.Informers)(nil)
	_ controller.Observer = (*facts.Observer)(nil)
	_ informers.Notifier  = (*eventloop.Loop)(nil)
)
