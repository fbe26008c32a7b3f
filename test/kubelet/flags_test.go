package kubelet

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestParseLabel(t *testing.T) {
	for _, tc := range []struct {
		in         string
		key, value string
		wantErr    bool
	}{
		{in: "zone=a", key: "zone", value: "a"},
		{in: "topology.kubernetes.io/zone=eu-1a", key: "topology.kubernetes.io/zone", value: "eu-1a"},
		{in: "empty=", key: "empty", value: ""},
		{in: "a=b=c", wantErr: true}, // '=' is not allowed in a value
		{in: "novalue", wantErr: true},
		{in: "=v", wantErr: true},
		{in: "bad key=v", wantErr: true},
		{in: "k=" + string(make([]byte, 64)), wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			k, v, err := ParseLabel(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseLabel(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if !tc.wantErr && (k != tc.key || v != tc.value) {
				t.Errorf("ParseLabel(%q) = %q, %q; want %q, %q", tc.in, k, v, tc.key, tc.value)
			}
		})
	}
}

func TestParseTaint(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    corev1.Taint
		wantErr bool
	}{
		{in: "pgloop.dev/data-plane=process:NoSchedule", want: corev1.Taint{Key: "pgloop.dev/data-plane", Value: "process", Effect: corev1.TaintEffectNoSchedule}},
		{in: "dedicated:NoExecute", want: corev1.Taint{Key: "dedicated", Effect: corev1.TaintEffectNoExecute}},
		{in: "k=v:PreferNoSchedule", want: corev1.Taint{Key: "k", Value: "v", Effect: corev1.TaintEffectPreferNoSchedule}},
		{in: "k=v", wantErr: true},
		{in: "k=v:", wantErr: true},
		{in: "k=v:Sometimes", wantErr: true},
		{in: ":NoSchedule", wantErr: true},
		{in: "k=bad value:NoSchedule", wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTaint(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseTaint(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Errorf("ParseTaint(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
