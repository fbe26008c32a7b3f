package testbed

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// adminUser is the identity of the plane's bearer token; system:masters
// bypasses RBAC, as kubeadm's admin.conf does.
const (
	adminUser   = "admin"
	adminGroup  = "system:masters"
	contextName = "pgloop-testbed"
)

// newToken returns a random bearer token.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("while generating the admin token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeTokenFile writes the apiserver's --token-auth-file.
func writeTokenFile(path, token string) error {
	line := fmt.Sprintf("%s,%s,%s-uid,%s\n", token, adminUser, adminUser, adminGroup)
	return os.WriteFile(path, []byte(line), 0o600)
}

// writeServiceAccountKeys writes the RSA key that signs service account
// tokens (apiserver and controller-manager) and its public half (apiserver).
func writeServiceAccountKeys(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("while generating the service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("while encoding the service account public key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o644)
}

// errNoCA means apiserver.crt does not yet hold the whole chain: the apiserver
// is still writing it.
var errNoCA = errors.New("serving certificate chain not written yet")

// extractCA returns, PEM encoded, the CA that signed the apiserver's
// self-signed serving certificate: apiserver.crt holds the serving
// certificate followed by that CA.
func extractCA(certPath string) ([]byte, error) {
	data, err := os.ReadFile(certPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errNoCA
		}
		return nil, err
	}
	var certs []*pem.Block
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return nil, errNoCA
		}
		certs = append(certs, block)
	}
	if len(certs) < 2 {
		return nil, errNoCA
	}
	ca := certs[len(certs)-1]
	parsed, _ := x509.ParseCertificate(ca.Bytes)
	if !parsed.IsCA {
		return nil, fmt.Errorf("last certificate of %s is not a CA (subject %s)", certPath, parsed.Subject)
	}
	return pem.EncodeToMemory(ca), nil
}

// writeKubeconfig writes a kubeconfig for the admin token and returns the
// matching rest.Config.
func writeKubeconfig(path, server string, caPEM []byte, token string) (*rest.Config, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName, Namespace: "default"}
	cfg.CurrentContext = contextName
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return nil, fmt.Errorf("while writing %s: %w", path, err)
	}
	restCfg, err := clientcmd.NewNonInteractiveClientConfig(*cfg, contextName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("while reading back %s: %w", path, err)
	}
	return restCfg, nil
}
