// Package rediskit holds what slotcron's two Redis packages share: the lock
// family (locking) and the slot store (slotstore). Scripts are loaded from
// embedded files; tokens are random; keys are grouped by Redis Cluster hash
// slot.
package rediskit

import (
	"crypto/rand"
	"encoding/base64"
	"io/fs"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Script returns the script in file name of fsys, with the files in prepend
// (shared helpers) in front of it. redis.Script.Run sends EVALSHA and falls
// back to EVAL when the server does not have the script cached. A missing
// file panics: the files are embedded, so that is a build error in disguise.
func Script(fsys fs.FS, name string, prepend ...string) *redis.Script {
	return redis.NewScript(Source(fsys, name, prepend...))
}

// Source returns the text Script would run.
func Source(fsys fs.FS, name string, prepend ...string) string {
	var src []byte
	for _, f := range append(prepend, name) {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			panic("rediskit: missing embedded script " + f)
		}
		src = append(append(src, b...), '\n')
	}
	return string(src)
}

// NewToken returns 128 bits from crypto/rand, base64url-encoded (22 characters).
func NewToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// HashTag returns the part of key that Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, when that text is not empty, and
// otherwise the whole key.
func HashTag(key string) string {
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

// HashSlot is the Redis Cluster hash slot of the tag: CRC16 (XMODEM) modulo
// 16384, as CLUSTER KEYSLOT computes it for a key whose hash tag is tag.
func HashSlot(tag string) uint16 {
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

// ScriptHeaderProblems checks that every .lua file of fsys starts with a
// header of comment lines that states its KEYS, its ARGV (when it reads any)
// and what it returns, and returns one line per problem.
func ScriptHeaderProblems(fsys fs.FS) []string {
	names, err := fs.Glob(fsys, "*.lua")
	if err != nil || len(names) == 0 {
		return []string{"no embedded scripts"}
	}
	var problems []string
	for _, name := range names {
		src, _ := fs.ReadFile(fsys, name)
		var header []string
		for _, line := range strings.Split(string(src), "\n") {
			if !strings.HasPrefix(line, "--") {
				break
			}
			header = append(header, line)
		}
		h := strings.Join(header, "\n")
		for _, want := range []string{"\n-- KEYS", "\n-- Returns"} {
			if !strings.Contains(h, want) {
				problems = append(problems, name+": header lacks a "+strings.TrimSpace(want)+" section")
			}
		}
		if strings.Contains(string(src), "ARGV[") && !strings.Contains(h, "\n-- ARGV") {
			problems = append(problems, name+": uses ARGV but its header does not document it")
		}
	}
	return problems
}
