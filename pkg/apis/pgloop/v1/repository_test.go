package v1

import (
	"testing"

	"k8s.io/utils/ptr"
)

func TestValidateBackup(t *testing.T) {
	good := func() *BackupS3 {
		return &BackupS3{Endpoint: "127.0.0.1:8333", Bucket: "pgloop", SecretName: "backup-creds", CAKey: "ca.crt"}
	}
	tests := []struct {
		name   string
		mutate func(p *Postgresql)
		want   []string
	}{
		{name: "a repository", mutate: func(p *Postgresql) { p.Spec.Backup = &Backup{S3: good()} }},
		{name: "a host name with a port", mutate: func(p *Postgresql) {
			b := good()
			b.Endpoint = "s3.eu-central-1.amazonaws.com:443"
			p.Spec.Backup = &Backup{S3: b}
		}},
		{name: "an IPv6 address", mutate: func(p *Postgresql) {
			b := good()
			b.Endpoint = "[::1]:9000"
			p.Spec.Backup = &Backup{S3: b}
		}},
		{name: "archiving off", mutate: func(p *Postgresql) { p.Spec.Backup = &Backup{Enabled: ptr.To(false)} }},
		{name: "a scheme", mutate: func(p *Postgresql) {
			b := good()
			b.Endpoint = "https://s3.example.com"
			p.Spec.Backup = &Backup{S3: b}
		}, want: []string{`spec.backup.s3.endpoint: Invalid value: "https://s3.example.com": must be host or host:port, without a scheme`}},
		{name: "a bad port", mutate: func(p *Postgresql) {
			b := good()
			b.Endpoint = "s3.example.com:99999"
			p.Spec.Backup = &Backup{S3: b}
		}, want: []string{"port must be a number from 1 to 65535"}},
		{name: "a bucket with capitals", mutate: func(p *Postgresql) {
			b := good()
			b.Bucket = "My_Bucket"
			p.Spec.Backup = &Backup{S3: b}
		}, want: []string{`spec.backup.s3.bucket: Invalid value: "My_Bucket": must be an S3 bucket name`}},
		{name: "a bad Secret name and CA key", mutate: func(p *Postgresql) {
			b := good()
			b.SecretName = "Creds!"
			b.CAKey = "ca/crt"
			p.Spec.Backup = &Backup{S3: b}
		}, want: []string{`spec.backup.s3.secretName: Invalid value: "Creds!"`, `spec.backup.s3.caKey: Invalid value: "ca/crt"`}},
		{name: "archive_command beside a repository", mutate: func(p *Postgresql) {
			p.Spec.Backup = &Backup{S3: good()}
			p.Spec.PostgreSQL.Parameters = map[string]string{"Archive_Command": "/bin/true"}
		}, want: []string{`spec.postgresql.parameters[Archive_Command]: Forbidden: is pgloop's while backup.s3 is set`}},
		{name: "archive_command with archiving off", mutate: func(p *Postgresql) {
			p.Spec.Backup = &Backup{Enabled: ptr.To(false), S3: good()}
			p.Spec.PostgreSQL.Parameters = map[string]string{"archive_command": "/bin/true"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValidate(t, tt.mutate, tt.want)
			// One error per wanted one: nothing else is refused.
			p := validCluster()
			p.Name = "acid-test"
			tt.mutate(p)
			if errs := p.Validate(); len(errs) != len(tt.want) {
				t.Errorf("%d errors, want %d: %v", len(errs), len(tt.want), errs.ToAggregate())
			}
		})
	}
}
