package informers

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// BenchmarkDecodeList measures what pgloop's client spends decoding the
// initial lists of a restart (and, object by object, the watch events of a
// burst), by kind and content type: JSON, or protobuf, which client-go's
// typed clients ask for by default (TestClientsAskForProtobuf in
// pkg/operator). One op is one list of 100 clusters' objects as the API
// server sends them. The API server's encoding is not measured here.
//
//	go test ./pkg/informers -run '^$' -bench DecodeList -benchmem
func BenchmarkDecodeList(b *testing.B) {
	const clusters = 100
	pods := &corev1.PodList{}
	services := &corev1.ServiceList{}
	statefulSets := &appsv1.StatefulSetList{}
	for i := range clusters {
		c := newAPICluster("ns", fmt.Sprintf("c%d", i), 2)
		for _, p := range c.pods {
			pods.Items = append(pods.Items, *p)
		}
		for _, s := range c.services {
			services.Items = append(services.Items, *s)
		}
		statefulSets.Items = append(statefulSets.Items, *c.statefulSet)
	}
	for _, kind := range []struct {
		name string
		list kruntime.Object
		into func() kruntime.Object
	}{
		{"pods", pods, func() kruntime.Object { return &corev1.PodList{} }},
		{"services", services, func() kruntime.Object { return &corev1.ServiceList{} }},
		{"statefulsets", statefulSets, func() kruntime.Object { return &appsv1.StatefulSetList{} }},
	} {
		for _, mediaType := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			info, ok := kruntime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
			if !ok {
				b.Fatalf("no serializer for %s", mediaType)
			}
			gv := corev1.SchemeGroupVersion
			if kind.name == "statefulsets" {
				gv = appsv1.SchemeGroupVersion
			}
			data, err := kruntime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, gv), kind.list)
			if err != nil {
				b.Fatal(err)
			}
			decoder := scheme.Codecs.DecoderToVersion(info.Serializer, gv)
			b.Run(kind.name+"/"+mediaType, func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, _, err := decoder.Decode(data, nil, kind.into()); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
