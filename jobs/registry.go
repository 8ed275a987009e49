package jobs

import (
	"fmt"
	"slices"
	"sync"
)

// Registry maps job names to Funcs. It is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	funcs map[string]Func
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{funcs: map[string]Func{}}
}

// Register adds fn under name. It returns an error wrapping ErrInvalidName
// for an empty name or one with a character outside [A-Za-z0-9_.-], or
// wrapping ErrDuplicate when name is taken. A nil fn is an error too.
func (r *Registry) Register(name string, fn Func) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("jobs: Register %q: nil Func", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.funcs[name]; ok {
		return fmt.Errorf("%w: %q is already registered", ErrDuplicate, name)
	}
	r.funcs[name] = fn
	return nil
}

// Lookup returns the Func registered under name.
func (r *Registry) Lookup(name string) (Func, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn, ok := r.funcs[name]
	return fn, ok
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.funcs))
	for name := range r.funcs {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// ValidateName returns an error wrapping ErrInvalidName unless name is a
// non-empty string of [A-Za-z0-9_.-]. Job names become parts of Redis keys.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q has %q at byte %d; use [A-Za-z0-9_.-]", ErrInvalidName, name, c, i)
		}
	}
	return nil
}
