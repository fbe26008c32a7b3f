package v1

import (
	"slices"
	"strings"
	"testing"
)

func TestValidateTLSAndRotation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(s *PostgresqlSpec)
		want   []string
	}{
		{name: "tls with defaults", mutate: func(s *PostgresqlSpec) { s.TLS = &TLS{SecretName: "db-tls"} }},
		{name: "tls with every file", mutate: func(s *PostgresqlSpec) {
			s.TLS = &TLS{SecretName: "db-tls", CertificateFile: "server.crt", PrivateKeyFile: "/etc/key.pem", CAFile: "ca.crt", CASecretName: "db-ca"}
		}},
		{name: "tls without a secret", mutate: func(s *PostgresqlSpec) { s.TLS = &TLS{} },
			want: []string{"spec.tls.secretName: Required value"}},
		{name: "tls secret name", mutate: func(s *PostgresqlSpec) { s.TLS = &TLS{SecretName: "Db_TLS"} },
			want: []string{`spec.tls.secretName: Invalid value: "Db_TLS"`}},
		{name: "tls file leaving the secret", mutate: func(s *PostgresqlSpec) { s.TLS = &TLS{SecretName: "t", PrivateKeyFile: "../key"} },
			want: []string{`spec.tls.privateKeyFile: Invalid value: "../key": must not leave the Secret's directory`}},
		{name: "tls unclean file", mutate: func(s *PostgresqlSpec) { s.TLS = &TLS{SecretName: "t", CertificateFile: "a//b"} },
			want: []string{`spec.tls.certificateFile: Invalid value: "a//b": must be a clean path`}},
		{name: "tls ca secret without ca file", mutate: func(s *PostgresqlSpec) { s.TLS = &TLS{SecretName: "t", CASecretName: "ca"} },
			want: []string{"spec.tls.caFile: Required value: caSecretName is set"}},
		{name: "rotation lists", mutate: func(s *PostgresqlSpec) {
			s.UsersWithSecretRotation = []string{"app"}
			s.UsersWithInPlaceSecretRotation = []string{"reader"}
			s.UsersIgnoringSecretRotation = []string{"app"}
		}},
		{name: "rotation of a system user", mutate: func(s *PostgresqlSpec) { s.UsersWithInPlaceSecretRotation = []string{"postgres", "standby"} },
			want: []string{`spec.usersWithInPlaceSecretRotation[0]: Invalid value: "postgres": a system user`,
				`spec.usersWithInPlaceSecretRotation[1]: Invalid value: "standby": a system user`}},
		{name: "rotation of an unknown user", mutate: func(s *PostgresqlSpec) { s.UsersWithSecretRotation = []string{"nobody"} },
			want: []string{`spec.usersWithSecretRotation[0]: Invalid value: "nobody": not a user of spec.users`}},
		{name: "rotation both ways", mutate: func(s *PostgresqlSpec) {
			s.UsersWithSecretRotation = []string{"app"}
			s.UsersWithInPlaceSecretRotation = []string{"app"}
		}, want: []string{`spec.usersWithInPlaceSecretRotation[0]: Invalid value: "app": also in usersWithSecretRotation`}},
		{name: "rotation twice", mutate: func(s *PostgresqlSpec) { s.UsersIgnoringSecretRotation = []string{"app", "app"} },
			want: []string{`spec.usersIgnoringSecretRotation[1]: Duplicate value: "app"`}},
		{name: "rotation role name too long", mutate: func(s *PostgresqlSpec) {
			long := strings.Repeat("u", 58) // 58 + yymmdd = 64 bytes
			s.Users[long] = UserFlags{}
			s.UsersWithSecretRotation = []string{long}
		}, want: []string{`would be 64 bytes, PostgreSQL keeps 63`}},
		{name: "rotation role name at the limit", mutate: func(s *PostgresqlSpec) {
			name := strings.Repeat("u", 57)
			s.Users[name] = UserFlags{}
			s.UsersWithSecretRotation = []string{name}
		}},
		{name: "rotation of a prepared default user", mutate: func(s *PostgresqlSpec) {
			s.PreparedDatabases = map[string]PreparedDatabase{"shop": {DefaultUsers: true}}
			s.UsersWithSecretRotation = []string{"shop_owner_user"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pg := validCluster()
			tt.mutate(&pg.Spec)
			errs := pg.Spec.Validate()
			got := errs.ToAggregate()
			if len(tt.want) == 0 {
				if got != nil {
					t.Fatalf("want valid, got %v", got)
				}
				return
			}
			if len(errs) != len(tt.want) {
				t.Errorf("got %d errors, want %d: %v", len(errs), len(tt.want), got)
			}
			for _, w := range tt.want {
				if got == nil || !strings.Contains(got.Error(), w) {
					t.Errorf("want an error containing %q, got %v", w, got)
				}
			}
		})
	}
}

func TestTLSPaths(t *testing.T) {
	tl := &TLS{SecretName: "t"}
	if tl.CertificatePath() != "/tls/tls.crt" || tl.PrivateKeyPath() != "/tls/tls.key" || tl.CAPath() != "" {
		t.Errorf("defaults: %s %s %q", tl.CertificatePath(), tl.PrivateKeyPath(), tl.CAPath())
	}
	tl = &TLS{SecretName: "t", CertificateFile: "/etc/ssl/c.pem", PrivateKeyFile: "k.pem", CAFile: "ca.crt", CASecretName: "ca"}
	if tl.CertificatePath() != "/etc/ssl/c.pem" || tl.PrivateKeyPath() != "/tls/k.pem" || tl.CAPath() != "/tlsca/ca.crt" {
		t.Errorf("set: %s %s %s", tl.CertificatePath(), tl.PrivateKeyPath(), tl.CAPath())
	}
}

func TestRotatedUsers(t *testing.T) {
	s := validCluster().Spec // app owns database app; reader owns none
	s.Users["flyway"] = UserFlags{}
	s.Users[SuperuserRole] = UserFlags{}
	s.UsersWithInPlaceSecretRotation = []string{"flyway"}
	s.UsersIgnoringSecretRotation = []string{"reader"}
	users, modes := s.RotatedUsers(false)
	if !slices.Equal(users, []string{"flyway"}) || modes["flyway"] != RotationInPlace {
		t.Errorf("listed only: %v %v", users, modes)
	}
	// Globally: every user but the database owner (app), the ignored one
	// and the superuser.
	users, modes = s.RotatedUsers(true)
	if !slices.Equal(users, []string{"flyway"}) {
		t.Errorf("global: %v %v", users, modes)
	}
	s.UsersIgnoringSecretRotation = nil
	users, modes = s.RotatedUsers(true)
	if !slices.Equal(users, []string{"flyway", "reader"}) || modes["reader"] != RotationNewRole {
		t.Errorf("global, none ignored: %v %v", users, modes)
	}
}
