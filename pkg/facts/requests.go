package facts

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
	"github.com/pgloop/pgloop/pkg/fsm"
)

// requests reads every request a cluster's users made, in one place: the
// sync's and the base backup's annotations on the resource, and the
// password rotations asked on the users' Secrets (the caches hold their
// annotations, not their data). The state machine records and answers
// each kind the same way (pkg/fsm's requests.go): a new kind of request (a
// switchover, a restart) is one more case here and there.
func requests(pg *v1.Postgresql, secrets []*corev1.Secret) []fsm.Request {
	var out []fsm.Request
	if v := pg.Annotations[v1.AnnotationSyncRequestedAt]; v != "" {
		out = append(out, fsm.Request{Kind: v1.RequestSync, Value: v})
	}
	if v := pg.Annotations[v1.AnnotationBackupRequestedAt]; v != "" {
		// The type as written: the machine refuses one it does not
		// know, with why.
		typ := pg.Annotations[v1.AnnotationBackupType]
		if typ == "" {
			typ = v1.BackupFull
		}
		out = append(out, fsm.Request{Kind: v1.RequestBackup, Value: v, Detail: typ})
	}
	var asking []string
	for _, s := range secrets {
		if _, ok := s.Annotations[v1.AnnotationRotatePassword]; ok {
			asking = append(asking, s.Name)
		}
	}
	if len(asking) > 0 {
		slices.Sort(asking)
		out = append(out, fsm.Request{Kind: v1.RequestRotatePassword, Value: strings.Join(asking, ",")})
	}
	return out
}
