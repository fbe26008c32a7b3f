//go:build tools

// Package tools pins the Kubernetes commands that the test bed builds into
// bin/: the control plane's, and the real node's kubelet and kube-proxy. It
// is never compiled into pgloop.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
