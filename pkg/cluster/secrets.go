package cluster

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/pgloop/pgloop/pkg/apis/pgloop/v1"
)

// Secrets hold the credentials of the cluster's database roles, one Secret
// per role, named as in the zalando operator with pgloop's domain:
// <user>.<cluster>.credentials.postgresql.pgloop.dev.
//
// The builders only build. The effect that ensures them creates a Secret
// when it is missing and never updates or overwrites one that exists: the
// password in it is the one PostgreSQL and the applications already use,
// and a new one would lock them out. To rotate a password, delete the
// Secret (pgloop creates a new one) and have the role's password changed.
const (
	// SecretUsernameKey is the key of the role name in a credentials
	// Secret.
	SecretUsernameKey = "username"
	// SecretPasswordKey is the key of the password.
	SecretPasswordKey = "password"
	// SecretNextPasswordKey holds, during a rotation, the new password of
	// a role's Secret: set before PostgreSQL's, moved to "password" after,
	// so a rotation cut short is finished by the next sync and never
	// loses the password PostgreSQL has.
	SecretNextPasswordKey = "next-password"
	// SecretNextUsernameKey holds, during a scheduled rotation, the role
	// that gets the new password: a new role, member of the user, or the
	// user itself.
	SecretNextUsernameKey = "next-username"
	// secretNameSuffix follows <user>.<cluster> in every Secret's name.
	secretNameSuffix = ".credentials.postgresql.pgloop.dev"
)

// PasswordLength is the length of generated passwords. Drawn uniformly from
// passwordAlphabet's 62 characters, a password carries about 381 bits.
const PasswordLength = 64

// passwordAlphabet holds only letters and digits, so a password needs no
// quoting in a connection string, a .pgpass line, YAML or a shell.
const passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// SecretName returns the name of the Secret of a role. A role name may hold
// '_', which a Secret name may not; it becomes '-'.
func SecretName(user, cluster string) string {
	return strings.ReplaceAll(user, "_", "-") + "." + cluster + secretNameSuffix
}

// Secrets returns the cluster's credentials Secrets: the superuser's, the
// replication user's, then one per spec.users entry in name order, one per
// default user of preparedDatabases, then the connection pooler's while a
// pooler is enabled (SecretUsers). Every
// password is new, drawn from random (crypto/rand.Reader when nil). It fails
// when random does, when two roles map to the same Secret name (a_b and
// a-b), or when random repeats a password, which only a broken source does.
func Secrets(pg *v1.Postgresql, random io.Reader) ([]*corev1.Secret, error) {
	if random == nil {
		random = rand.Reader
	}
	users := SecretUsers(pg)
	byName := make(map[string]string, len(users))
	passwords := make(map[string]bool, len(users))
	secrets := make([]*corev1.Secret, 0, len(users))
	for _, user := range users {
		name := SecretName(user, pg.Name)
		if other, ok := byName[name]; ok {
			return nil, fmt.Errorf("users %q and %q would share the secret %s", other, user, name)
		}
		byName[name] = user
		password, err := Password(random)
		if err != nil {
			return nil, fmt.Errorf("password for user %q: %w", user, err)
		}
		if passwords[password] {
			return nil, errors.New("random source repeated a password: refusing to hand out the same password twice")
		}
		passwords[password] = true
		secrets = append(secrets, credentialsSecret(pg, name, user, password))
	}
	return secrets, nil
}

// SecretUsers are the roles that have a credentials Secret, in the order
// of Secrets: the superuser, the replication user, the manifest's users in
// name order, the default users of preparedDatabases in name order, then
// the connection pooler's role while a pooler is enabled.
func SecretUsers(pg *v1.Postgresql) []string {
	users := append([]string{SuperuserName, ReplicationUserName}, slices.Sorted(maps.Keys(pg.Spec.Users))...)
	users = append(users, pg.Spec.PreparedUsers()...)
	if pg.Spec.AnyPoolerEnabled() {
		users = append(users, pg.Spec.PoolerUser())
	}
	return users
}

// Secret returns the credentials Secret of one role with a new password.
func Secret(pg *v1.Postgresql, user string, random io.Reader) (*corev1.Secret, error) {
	if random == nil {
		random = rand.Reader
	}
	password, err := Password(random)
	if err != nil {
		return nil, fmt.Errorf("password for user %q: %w", user, err)
	}
	return credentialsSecret(pg, SecretName(user, pg.Name), user, password), nil
}

func credentialsSecret(pg *v1.Postgresql, name, user, password string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(pg, name),
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			SecretUsernameKey: []byte(user),
			SecretPasswordKey: []byte(password),
		},
	}
}

// Password returns PasswordLength characters of passwordAlphabet drawn
// uniformly from random. Bytes at or above the largest multiple of the
// alphabet's size are skipped, so that no character is likelier than
// another (plain modulo would favour the first 8).
func Password(random io.Reader) (string, error) {
	const n = len(passwordAlphabet)
	const limit = 256 - 256%n // 248: bytes below it map uniformly
	out := make([]byte, 0, PasswordLength)
	buf := make([]byte, PasswordLength+PasswordLength/4)
	// A good source needs one read, rarely two; the bound turns a source
	// that returns only rejected bytes into an error, not a hang.
	for reads := 0; len(out) < PasswordLength; reads++ {
		if reads == 64 {
			return "", errors.New("random source yields no usable bytes")
		}
		if _, err := io.ReadFull(random, buf); err != nil {
			return "", fmt.Errorf("read random bytes: %w", err)
		}
		for _, b := range buf {
			if int(b) < limit && len(out) < PasswordLength {
				out = append(out, passwordAlphabet[int(b)%n])
			}
		}
	}
	return string(out), nil
}
