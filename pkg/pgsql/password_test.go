package pgsql

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"io"
	mathrand "math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestNewPassword(t *testing.T) {
	seeded := func() io.Reader { return mathrand.NewChaCha8([32]byte{1}) }
	a, err := NewPassword(seeded())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPassword(seeded())
	c, _ := NewPassword(nil)
	if a != b {
		t.Errorf("the same source gave %q and %q", a, b)
	}
	for _, p := range []string{a, c} {
		if len(p) != 32 || strings.Trim(p, passwordAlphabet) != "" {
			t.Errorf("password %q: want 32 of [A-Za-z0-9]", p)
		}
	}
	if a == c {
		t.Errorf("crypto/rand gave the seeded password %q", a)
	}
	if _, err := NewPassword(strings.NewReader("short")); !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Errorf("short reader: %v", err)
	}
}

func TestPasswordMatches(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	const password = "p\u00e4ss 'w\\rd"
	if _, err := Sync(ctx, srv.endpoint(), Desired{Roles: []Role{{Name: "verifier_app", Password: password}}}, Options{}); err != nil {
		t.Fatal(err)
	}
	var verifier string
	if err := srv.super(t).QueryRow(ctx, "SELECT rolpassword FROM pg_authid WHERE rolname = 'verifier_app'").Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	md5Sum := md5.Sum([]byte(password + "verifier_app"))
	md5Verifier := "md5" + hex.EncodeToString(md5Sum[:])

	cases := []struct {
		name, verifier, password string
		want                     bool
	}{
		{"scram", verifier, password, true},
		{"scram, other password", verifier, password + "x", false},
		{"md5", md5Verifier, password, true},
		{"md5, other password", md5Verifier, "x", false},
		{"none", "", password, false},
		{"garbage", "SCRAM-SHA-256$x:y$z", password, false},
		{"too many iterations", strings.Replace(verifier, "$4096:", "$99999999:", 1), password, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := passwordMatches(tc.verifier, "verifier_app", tc.password); got != tc.want {
				t.Errorf("passwordMatches(%q) = %v, want %v", tc.verifier, got, tc.want)
			}
		})
	}
}

// TestSetPasswordRotation rotates a superuser's password the way pgloop
// rotates postgres': the endpoint knows the old and the new one, so it gets
// in before, during and after.
func TestSetPasswordRotation(t *testing.T) {
	srv := startServer(t)
	ctx := context.Background()
	if _, err := Sync(ctx, srv.endpoint(), Desired{Roles: []Role{{Name: "rotate_su", Flags: []string{"SUPERUSER"}, Password: "old-su"}}}, Options{}); err != nil {
		t.Fatal(err)
	}
	ep := Endpoint{Label: "primary", Host: "127.0.0.1", Port: srv.port, User: "rotate_su", Passwords: []string{"old-su", "new-su"}}
	if err := SetPassword(ctx, ep, "rotate_su", "new-su", Options{}); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if err := srv.login(ctx, "rotate_su", "old-su", "postgres"); !errors.As(err, &pgErr) || pgErr.Code != codeInvalidPassword {
		t.Errorf("old password: %v, want 28P01", err)
	}
	if err := srv.login(ctx, "rotate_su", "new-su", "postgres"); err != nil {
		t.Errorf("new password: %v", err)
	}
	// Half-way: the old password is refused, the new one gets in.
	var rec recorder
	if err := SetPassword(ctx, ep, "rotate_su", "new-su", rec.options()); err != nil {
		t.Fatal(err)
	}
	if want := []string{OutcomeError, OutcomeOK, OutcomeOK}; strings.Join(rec.outcomes, " ") != strings.Join(want, " ") {
		t.Errorf("observed %v, want %v", rec.outcomes, want)
	}

	err := SetPassword(ctx, srv.endpoint(), "rotate_nobody", "x", Options{})
	if want := `primary 127.0.0.1:` + strconv.Itoa(srv.port) + `: set password of role rotate_nobody: role "rotate_nobody" does not exist`; err == nil || err.Error() != want {
		t.Errorf("missing role: %v, want %q", err, want)
	}
	if err := SetPassword(ctx, srv.endpoint(), "rotate_su", "", Options{}); err == nil {
		t.Error("empty password: no error")
	}
}
