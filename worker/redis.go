package worker

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// redisReadTimeout is how long the worker's Redis client waits for an
// answer. A batch of claims or finishes with redis.wait_replicas is answered
// after its WAIT, so redis.wait_timeout must stay well under it.
const redisReadTimeout = 3 * time.Second

// NewRedis returns a client for cfg and a function that closes it. Mode
// embedded starts an in-process Redis (miniredis) first, for demos and
// development: it keeps nothing and is gone with the process.
func NewRedis(cfg RedisConfig) (redis.UniversalClient, func(), error) {
	var tlsConfig *tls.Config
	if cfg.TLS.Enabled {
		tlsConfig = &tls.Config{InsecureSkipVerify: cfg.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if cfg.TLS.CAFile != "" {
			pem, err := os.ReadFile(cfg.TLS.CAFile)
			if err != nil {
				return nil, nil, fmt.Errorf("worker: redis.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, fmt.Errorf("worker: redis.tls.ca_file %s holds no PEM certificate", cfg.TLS.CAFile)
			}
			tlsConfig.RootCAs = pool
		}
	}
	const dial, read = 5 * time.Second, redisReadTimeout
	switch cfg.Mode {
	case ModeSingle:
		c := redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], Username: cfg.Username, Password: cfg.Password,
			DB: cfg.DB, TLSConfig: tlsConfig, DialTimeout: dial, ReadTimeout: read, WriteTimeout: read,
			ContextTimeoutEnabled: true})
		return c, func() { c.Close() }, nil
	case ModeSentinel:
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: cfg.MasterName, SentinelAddrs: cfg.Addrs,
			SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword,
			Username: cfg.Username, Password: cfg.Password, DB: cfg.DB, TLSConfig: tlsConfig,
			DialTimeout: dial, ReadTimeout: read, WriteTimeout: read, ContextTimeoutEnabled: true})
		return c, func() { c.Close() }, nil
	case ModeCluster:
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs, Username: cfg.Username,
			Password: cfg.Password, TLSConfig: tlsConfig, DialTimeout: dial, ReadTimeout: read, WriteTimeout: read,
			ContextTimeoutEnabled: true})
		return c, func() { c.Close() }, nil
	case ModeEmbedded:
		addr, stop, err := StartEmbeddedRedis()
		if err != nil {
			return nil, nil, err
		}
		c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, DialTimeout: dial,
			ReadTimeout: read, WriteTimeout: read, ContextTimeoutEnabled: true})
		return c, func() { c.Close(); stop() }, nil
	}
	return nil, nil, fmt.Errorf("worker: redis.mode %q", cfg.Mode)
}

// StartEmbeddedRedis starts miniredis on a free loopback port, with its clock
// driven in real time: miniredis only ages TTLs when told to, so a goroutine
// moves its clock forward every 10ms. It returns the address and a function
// that stops both.
func StartEmbeddedRedis() (addr string, stop func(), err error) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		return "", nil, fmt.Errorf("worker: start embedded Redis: %w", err)
	}
	last := time.Now()
	m.SetTime(last)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				m.SetTime(now)
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	var once sync.Once
	return m.Addr(), func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			m.Close()
		})
	}, nil
}
