// Command coredns is CoreDNS (github.com/coredns/coredns, Apache-2.0) with
// only the plugins the test plane's cluster DNS uses: the plane's real
// nodes point their pods' resolv.conf at it (docs/testbed.md, "Real
// nodes"). Built into bin/ by test/tools/build.sh; never part of pgloop.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the plugins in CoreDNS's own order (its plugin.cfg): a
// server block runs them in this order whatever order the Corefile gives.
var directives = []string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
