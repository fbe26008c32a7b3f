package testbed

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// S3 is what a client needs to reach the object store: an S3 endpoint
// served over HTTPS only, with a certificate signed by the plane's CA
// (CAFile), one access key that may do anything, and a bucket created at
// start. Paths are path-style (https://endpoint/bucket/key): the
// certificate has no name for virtual-host-style bucket.host names.
type S3 struct {
	// Endpoint is host:port, 127.0.0.1 and a free port.
	Endpoint string `json:"endpoint"`
	Host     string `json:"host"`
	Port     int    `json:"port"`
	// Region is the region requests are signed for (SigV4); the store
	// takes any.
	Region    string `json:"region"`
	Bucket    string `json:"bucket"`
	AccessKey string `json:"accessKey"`
	SecretKey string `json:"secretKey"`
	// CAFile is the PEM file of the CA that signed the store's serving
	// certificate: 0644 in directories the postgres user can traverse, so
	// pgBackRest run by PostgreSQL reads it.
	CAFile string `json:"caFile"`
	// URIStyle is "path" (pgBackRest's repo1-s3-uri-style).
	URIStyle string `json:"uriStyle"`
}

// URL is the endpoint's base URL.
func (s S3) URL() string { return "https://" + s.Endpoint }

// EnvPrefix starts the names of the variables of Env.
const EnvPrefix = "PGLOOP_S3_"

// Env returns s as NAME=value lines, PGLOOP_S3_ENDPOINT and so on, for a
// shell to source (no value needs quoting) or a program to read.
func (s S3) Env() []string {
	return []string{
		EnvPrefix + "ENDPOINT=" + s.Endpoint,
		EnvPrefix + "HOST=" + s.Host,
		EnvPrefix + "PORT=" + strconv.Itoa(s.Port),
		EnvPrefix + "REGION=" + s.Region,
		EnvPrefix + "BUCKET=" + s.Bucket,
		EnvPrefix + "ACCESS_KEY=" + s.AccessKey,
		EnvPrefix + "SECRET_KEY=" + s.SecretKey,
		EnvPrefix + "CA_FILE=" + s.CAFile,
		EnvPrefix + "URI_STYLE=" + s.URIStyle,
	}
}

// JSON returns s as indented JSON.
func (s S3) JSON() []byte {
	data, _ := json.MarshalIndent(s, "", "  ")
	return append(data, '\n')
}

// HTTPClient returns a client that trusts only the store's CA.
func (s S3) HTTPClient() (*http.Client, error) {
	caPEM, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", s.CAFile)
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			Proxy:           nil,
			DialContext:     (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}, nil
}

// Do sends one request signed with AWS Signature Version 4 to path (e.g.
// "/bucket", "/bucket/key", "/bucket?list-type=2": the query, if any, must
// already be in canonical form, its keys sorted and its values escaped) and
// returns the status and body. client nil means a new HTTPClient.
func (s S3) Do(ctx context.Context, client *http.Client, method, path string, body []byte) (int, []byte, error) {
	if client == nil {
		var err error
		if client, err = s.HTTPClient(); err != nil {
			return 0, nil, err
		}
		defer client.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	s.sign(req, body, time.Now())
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// sign adds the headers of AWS Signature Version 4 for the s3 service,
// signing host, x-amz-content-sha256 and x-amz-date.
func (s S3) sign(req *http.Request, body []byte, now time.Time) {
	now = now.UTC()
	amzDate := now.Format("20060102T150405Z")
	day := now.Format("20060102")
	payload := sha256.Sum256(body)
	payloadHex := hex.EncodeToString(payload[:])
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payloadHex)

	uri := req.URL.EscapedPath()
	if uri == "" {
		uri = "/"
	}
	const signed = "host;x-amz-content-sha256;x-amz-date"
	canonical := strings.Join([]string{
		req.Method,
		uri,
		req.URL.RawQuery,
		"host:" + req.URL.Host + "\n" +
			"x-amz-content-sha256:" + payloadHex + "\n" +
			"x-amz-date:" + amzDate + "\n",
		signed,
		payloadHex,
	}, "\n")
	scope := day + "/" + s.Region + "/s3/aws4_request"
	canonicalHash := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(canonicalHash[:])
	key := []byte("AWS4" + s.SecretKey)
	for _, part := range []string{day, s.Region, "s3", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	req.Header.Set("Authorization", fmt.Sprintf("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s",
		s.AccessKey, scope, signed, hex.EncodeToString(hmacSHA256(key, toSign))))
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}
