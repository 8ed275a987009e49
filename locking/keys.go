package locking

import (
	"fmt"
	"strings"
)

// Key returns prefix + ":{" + name + "}". Every key slotcron derives from it
// shares its Redis Cluster hash slot, so scripts that touch several of them
// never fail with CROSSSLOT.
func Key(prefix, name string) string {
	return prefix + ":{" + name + "}"
}

// hashTag returns the part of key that Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, when that text is not empty, and
// otherwise the whole key.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// derivedKey returns a key for suffix that lives in key's cluster slot:
// key + ":" + suffix when key has a hash tag, else "{" + key + "}:" + suffix.
func derivedKey(key, suffix string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if tag := hashTag(key); tag != key {
		return key + ":" + suffix, nil
	}
	if strings.ContainsRune(key, '}') {
		return "", fmt.Errorf("%w: %q has no hash tag and contains '}'; use locking.Key to build it", ErrInvalidKey, key)
	}
	return "{" + key + "}:" + suffix, nil
}

// releaseChannel is the pub/sub channel on which Release announces that key is free.
// It shares key's hash tag. For a key that derivedKey refuses, the channel is
// still usable (channels are not keys); only its shard differs.
func releaseChannel(key string) string {
	if ch, err := derivedKey(key, "released"); err == nil {
		return ch
	}
	return key + ":released"
}

// hashSlot is the Redis Cluster hash slot of the tag name: CRC16 (XMODEM)
// modulo 16384, as CLUSTER KEYSLOT computes it.
func hashSlot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
