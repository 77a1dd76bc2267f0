package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// kubeletClientCerts writes, into dir, a CA (ca.crt) and a client certificate signed by it
// (client.crt, client.key) for the API server to authenticate to the kubelet: the kubelet listens on
// the host's address (the API server refuses loopback node addresses), so it accepts only clients with
// a certificate from this CA.
func kubeletClientCerts(dir string) (ca, cert, key string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "vgpu-e2e-kubelet-client-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("create CA: %w", err)
	}
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	clientTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "vgpu-e2e-apiserver", Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, clientTmpl, caCert, &clientKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", fmt.Errorf("create client cert: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		return "", "", "", err
	}
	ca, cert, key = filepath.Join(dir, "kubelet-client-ca.crt"), filepath.Join(dir, "kubelet-client.crt"), filepath.Join(dir, "kubelet-client.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{ca, "CERTIFICATE", caDER}, {cert, "CERTIFICATE", clientDER}, {key, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return ca, cert, key, nil
}

// servingCerts writes, into dir, a CA (serving-ca.crt) and a serving certificate for the API server
// signed by it (serving.crt, serving.key) valid for the given addresses and DNS names. The CA is what
// every client verifies the API server with: the harness, the kubelets, the scheduler, the controller
// manager and, through the kube-root-ca.crt ConfigMap the controller manager publishes, every pod.
func servingCerts(dir string, ips []net.IP, dnsNames []string) (ca, cert, key string, caPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "vgpu-e2e-apiserver-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", nil, fmt.Errorf("create serving CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", nil, err
	}
	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
		DNSNames:     dnsNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", nil, fmt.Errorf("create serving cert: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(servingKey)
	if err != nil {
		return "", "", "", nil, err
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	ca, cert, key = filepath.Join(dir, "serving-ca.crt"), filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	for _, f := range []struct {
		path string
		data []byte
	}{
		{ca, caPEM},
		{cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})},
		{key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})},
	} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return "", "", "", nil, err
		}
	}
	return ca, cert, key, caPEM, nil
}

// hostIP returns the host's IPv4 address used for its default route, else its first non-loopback
// IPv4 address. The kubelet refuses a loopback node IP.
func hostIP() (net.IP, error) {
	// A UDP "connection" sends nothing; it only selects the source address.
	if conn, err := net.Dial("udp4", "192.0.2.1:9"); err == nil {
		ip := conn.LocalAddr().(*net.UDPAddr).IP
		conn.Close()
		if !ip.IsLoopback() && !ip.IsUnspecified() {
			return ip, nil
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP, nil
		}
	}
	return nil, errors.New("no non-loopback IPv4 address for the node")
}
