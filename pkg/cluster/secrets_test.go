package cluster

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

func TestSecretName(t *testing.T) {
	cases := []struct{ user, cluster, want string }{
		{"postgres", "acid-x", "postgres.acid-x.credentials.postgresql.pgloop.dev"},
		{"standby", "acid-x", "standby.acid-x.credentials.postgresql.pgloop.dev"},
		{"app_owner", "acid-x", "app-owner.acid-x.credentials.postgresql.pgloop.dev"},
		{"a_b_c", "acid-x", "a-b-c.acid-x.credentials.postgresql.pgloop.dev"},
		{"team.reader", "acid-x", "team.reader.acid-x.credentials.postgresql.pgloop.dev"},
	}
	for _, c := range cases {
		if got := SecretName(c.user, c.cluster); got != c.want {
			t.Errorf("SecretName(%q, %q) = %q, want %q", c.user, c.cluster, got, c.want)
		}
	}
}

func TestSecrets(t *testing.T) {
	pg := loadSample(t, "full")
	secrets, err := Secrets(pg, nil) // crypto/rand
	if err != nil {
		t.Fatal(err)
	}
	wantUsers := []string{"postgres", "standby", "admin", "app_owner", "app_reader", "replicator",
		"shop_history_owner_user", "shop_history_reader_user", "shop_history_writer_user",
		"shop_owner_user", "shop_reader_user", "shop_writer_user", "pooler"}
	if len(secrets) != len(wantUsers) {
		t.Fatalf("%d secrets, want %d", len(secrets), len(wantUsers))
	}
	for i, s := range secrets {
		user := wantUsers[i]
		if s.Name != SecretName(user, pg.Name) {
			t.Errorf("secret %d is %s, want the one of %s", i, s.Name, user)
		}
		if got := string(s.Data[SecretUsernameKey]); got != user {
			t.Errorf("%s: username %q, want %q (the role name, unsanitised)", s.Name, got, user)
		}
		if len(s.Data) != 2 || s.StringData != nil || s.Type != "Opaque" {
			t.Errorf("%s: want exactly username and password in data of an Opaque secret, got %v %v %s", s.Name, s.Data, s.StringData, s.Type)
		}
		checkPassword(t, string(s.Data[SecretPasswordKey]))
	}
}

func checkPassword(t *testing.T, p string) {
	t.Helper()
	if len(p) != PasswordLength {
		t.Errorf("password of length %d, want %d", len(p), PasswordLength)
	}
	if strings.Trim(p, passwordAlphabet) != "" {
		t.Errorf("password %q has characters outside the alphabet", p)
	}
}

// TestPasswordsNeverRepeat builds the secrets of many clusters from the
// real random source and checks that no password appears twice.
func TestPasswordsNeverRepeat(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		secrets, err := Secrets(wideCluster(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			p := string(s.Data[SecretPasswordKey])
			checkPassword(t, p)
			if seen[p] {
				t.Fatalf("password repeated")
			}
			seen[p] = true
		}
	}
}

func TestSecretsErrors(t *testing.T) {
	cases := []struct {
		name   string
		users  map[string]v1.UserFlags
		zeroes bool // read from an all-zero source
		want   string
	}{
		{
			name:  "two users, one secret name",
			users: map[string]v1.UserFlags{"a_b": {}, "a-b": {}},
			want:  `users "a-b" and "a_b" would share the secret a-b.c.credentials.postgresql.pgloop.dev`,
		},
		{
			name:   "a broken source repeats passwords",
			users:  map[string]v1.UserFlags{"app": {}},
			zeroes: true,
			want:   "random source repeated a password",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pg := &v1.Postgresql{Spec: v1.PostgresqlSpec{Users: c.users}}
			pg.Name = "c"
			var random io.Reader = seeded(3)
			if c.zeroes {
				random = bytes.NewReader(make([]byte, 1<<16))
			}
			_, err := Secrets(pg, random)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one containing %q", err, c.want)
			}
		})
	}

	fail := errors.New("entropy gone")
	pg := loadSample(t, "minimal")
	if _, err := Secrets(pg, iotest.ErrReader(fail)); !errors.Is(err, fail) {
		t.Errorf("a failing source: err = %v, want it wrapped", err)
	}
	if _, err := Secret(pg, "app", iotest.ErrReader(fail)); !errors.Is(err, fail) {
		t.Errorf("Secret with a failing source: err = %v, want it wrapped", err)
	}
	if _, err := Password(bytes.NewReader(bytes.Repeat([]byte{0xff}, 1<<16))); err == nil {
		t.Errorf("a source of unusable bytes gives a password")
	}
}

// TestPasswordRejectsBias feeds bytes that plain modulo would map onto the
// first characters; they must be skipped.
func TestPasswordRejectsBias(t *testing.T) {
	input := []byte{255, 248, 250, 0, 1, 61, 62, 247}
	for i := 0; len(input) < 4*PasswordLength; i++ {
		input = append(input, byte(i%248))
	}
	p, err := Password(bytes.NewReader(input))
	if err != nil {
		t.Fatal(err)
	}
	// 255, 248 and 250 are skipped; 0 -> A, 1 -> B, 61 -> 9, 62 -> A (62 % 62), 247 -> 247 % 62 = 61 -> 9.
	if want := "AB9A9"; !strings.HasPrefix(p, want) {
		t.Errorf("password starts %q, want %q", p[:5], want)
	}
	checkPassword(t, p)
}

func TestSecret(t *testing.T) {
	pg := loadSample(t, "minimal")
	s, err := Secret(pg, "foo_user", seeded(2))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "foo-user.acid-minimal-cluster.credentials.postgresql.pgloop.dev" || string(s.Data["username"]) != "foo_user" {
		t.Errorf("Secret = %s for %q", s.Name, s.Data["username"])
	}
	checkPassword(t, string(s.Data["password"]))
}
