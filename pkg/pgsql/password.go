package pgsql

import (
	"context"
	"crypto/hmac"
	"crypto/md5"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/text/secure/precis"
)

// SetPassword sets role's password to password on ep (ALTER ROLE ...
// PASSWORD), nothing else. It is how the superuser's password is rotated:
// ep.Passwords lists the old one and the new one, so that a rotation that
// stopped half-way can be finished.
func SetPassword(ctx context.Context, ep Endpoint, role, password string, opts Options) error {
	if password == "" {
		return fmt.Errorf("%s: set password of role %s: the password is empty", ep, role)
	}
	if err := checkName(role); err != nil {
		return fmt.Errorf("%s: set password of role %s: %w", ep, role, err)
	}
	opts = opts.withDefaults()
	s, err := connect(ctx, ep, opts)
	if err != nil {
		return err
	}
	defer s.close(ctx)
	if err := s.hidePasswords(ctx); err != nil {
		return fmt.Errorf("%s: hide passwords from the server's log: %w", ep, err)
	}
	literal, err := s.literal(password)
	if err != nil {
		return fmt.Errorf("%s: set password of role %s: %w", ep, role, err)
	}
	if err := s.exec(ctx, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" WITH PASSWORD "+literal); err != nil {
		return fmt.Errorf("%s: set password of role %s: %w", ep, role, err)
	}
	return nil
}

// passwordAlphabet is what NewPassword draws from: nothing that needs
// quoting in a URL, a shell or a connection string.
const passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// passwordLength gives a password of about 190 bits.
const passwordLength = 32

// NewPassword returns a random password of 32 characters from [A-Za-z0-9],
// drawn from r, or from crypto/rand when r is nil.
func NewPassword(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	n := big.NewInt(int64(len(passwordAlphabet)))
	var b strings.Builder
	for range passwordLength {
		i, err := rand.Int(r, n) // uniform: rejects what would bias the draw
		if err != nil {
			return "", fmt.Errorf("new password: %w", err)
		}
		b.WriteByte(passwordAlphabet[i.Int64()])
	}
	return b.String(), nil
}

// passwordMatches says whether verifier, a role's pg_authid.rolpassword, is
// one of password, so that a sync sets a password only when it changed.
// A verifier it cannot read, or a password PostgreSQL would prepare
// otherwise than here, reads as "does not match": the password is set
// again, which is harmless.
func passwordMatches(verifier, role, password string) bool {
	switch {
	case strings.HasPrefix(verifier, "SCRAM-SHA-256$"):
		return scramMatches(verifier, password)
	case strings.HasPrefix(verifier, "md5"):
		sum := md5.Sum([]byte(password + role))
		return subtle.ConstantTimeCompare([]byte(verifier), []byte("md5"+hex.EncodeToString(sum[:]))) == 1
	}
	return false
}

// scramMatches checks password against a SCRAM-SHA-256 verifier,
// "SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>" (RFC 5803),
// as PostgreSQL computes it: SaltedPassword is PBKDF2 of the SASLprep'ed
// password (the password as it is when SASLprep refuses it).
func scramMatches(verifier, password string) bool {
	rest, _ := strings.CutPrefix(verifier, "SCRAM-SHA-256$")
	params, keys, ok := strings.Cut(rest, "$")
	if !ok {
		return false
	}
	iterText, saltText, ok1 := strings.Cut(params, ":")
	storedText, serverText, ok2 := strings.Cut(keys, ":")
	iterations, err := strconv.Atoi(iterText)
	if !ok1 || !ok2 || err != nil || iterations <= 0 || iterations > maxIterations {
		return false
	}
	salt, err1 := base64.StdEncoding.DecodeString(saltText)
	storedKey, err2 := base64.StdEncoding.DecodeString(storedText)
	serverKey, err3 := base64.StdEncoding.DecodeString(serverText)
	if err := errors.Join(err1, err2, err3); err != nil {
		return false
	}
	if prepared, err := precis.OpaqueString.String(password); err == nil {
		password = prepared
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return false
	}
	clientKey := hmacSHA256(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	return hmac.Equal(stored[:], storedKey) && hmac.Equal(hmacSHA256(salted, "Server Key"), serverKey)
}

// maxIterations bounds the work of scramMatches: a verifier with more
// iterations (scram_iterations far above its default of 4096) reads as "does
// not match", and the password is set again.
const maxIterations = 1 << 20

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}
