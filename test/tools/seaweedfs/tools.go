//go:build tools

// Package tools pins SeaweedFS, whose `weed` command the test bed builds into
// bin/ to serve S3 on loopback (the object store of backups; docs/testbed.md).
// It is never compiled into pgloop.
package tools

import (
	_ "github.com/seaweedfs/seaweedfs/weed"
)
