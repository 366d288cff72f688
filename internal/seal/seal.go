// Package seal encrypts a small message to a one-time key: the activity
// that waits for a client's answer to an upstream's request makes a key
// pair and publishes the public half; the gateway seals the answer to it;
// only the activity, holding the private half in memory, opens it. What
// travels through Temporal (and stays in the task's history) is
// ciphertext nobody can open once the activity is gone.
//
// X25519, HKDF-SHA256 and AES-256-GCM from the standard library. Every
// sealing makes its own ephemeral key, so each AES key encrypts one
// message and a fixed nonce is safe.
//
// This package is a leaf: the standard library only, no logging.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

const info = "airlock-seal-v1"

// NewKey makes a one-time key pair; its PublicKey().Bytes() is what a
// sender seals to.
func NewKey() (*ecdh.PrivateKey, error) { return ecdh.X25519().GenerateKey(rand.Reader) }

func aead(shared, peer, recipient []byte) (cipher.AEAD, error) {
	salt := append(append([]byte{}, peer...), recipient...)
	key, err := hkdf.Key(sha256.New, shared, salt, info, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts msg to the X25519 public key to. It returns the sender's
// one-time public key (peer) and the ciphertext.
func Seal(to, msg []byte) (peer, sealed []byte, err error) {
	pub, err := ecdh.X25519().NewPublicKey(to)
	if err != nil {
		return nil, nil, fmt.Errorf("seal: recipient key: %w", err)
	}
	eph, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	shared, err := eph.ECDH(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("seal: %w", err)
	}
	peer = eph.PublicKey().Bytes()
	a, err := aead(shared, peer, to)
	if err != nil {
		return nil, nil, err
	}
	return peer, a.Seal(nil, make([]byte, a.NonceSize()), msg, nil), nil
}

// ErrOpen is returned when a message does not open with the key: sealed
// to another key, or altered.
var ErrOpen = errors.New("seal: the message does not open with this key")

// Open decrypts what Seal made for key's public half.
func Open(key *ecdh.PrivateKey, peer, sealed []byte) ([]byte, error) {
	pub, err := ecdh.X25519().NewPublicKey(peer)
	if err != nil {
		return nil, ErrOpen
	}
	shared, err := key.ECDH(pub)
	if err != nil {
		return nil, ErrOpen
	}
	a, err := aead(shared, peer, key.PublicKey().Bytes())
	if err != nil {
		return nil, err
	}
	msg, err := a.Open(nil, make([]byte, a.NonceSize()), sealed, nil)
	if err != nil {
		return nil, ErrOpen
	}
	return msg, nil
}
