package sandbox_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// TestImageClone checks that Clone copies every slice, map and pointer of
// an Image, however deep: the image store hands out clones of the images
// it caches, and a caller that changed a shared one would change the next
// sandbox's image. The example must set every such field (the walk fails
// on one left nil), so a field added to Image later is covered once the
// example sets it.
func TestImageClone(t *testing.T) {
	img := sandbox.Image{
		Name: "x", TopLayer: "l", Env: []string{"A=1"}, Workdir: "/w", User: "u",
		Binds:     []sandbox.Bind{{Source: "/usr", Target: "/usr", Readonly: true, Hide: []string{"etc"}}},
		Created:   time.Unix(1, 0),
		Resources: sandbox.Resources{CPUs: 1, MemoryBytes: 1 << 20},
		Network: &netpolicy.Settings{
			Mode:    netpolicy.Mode("allowlist"),
			Allow:   []string{"example.org"},
			Secrets: []netpolicy.SecretRef{{Name: "k", Hosts: []string{"api.example.org"}, Placeholder: "p"}},
		},
		Disk: "d", Memory: "m", Origin: "o",
		Volumes: []sandbox.VolumeMount{{Name: "v", Target: "/v"}},
	}
	c := img.Clone()
	if !reflect.DeepEqual(c, img) {
		t.Fatalf("Clone() = %+v, want %+v", c, img)
	}
	shared(t, "Image", reflect.ValueOf(img), reflect.ValueOf(c))

	var none sandbox.Image
	if c := none.Clone(); !reflect.DeepEqual(c, none) {
		t.Errorf("zero Image Clone() = %+v", c)
	}
}

// shared fails the test for each reference in a that b shares, and for each
// nil or empty reference in a (the example must exercise it).
func shared(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	switch a.Kind() {
	case reflect.Pointer, reflect.Map:
		if a.IsNil() {
			t.Errorf("%s is nil in the example: set it", path)
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s is shared by the clone", path)
		}
		if a.Kind() == reflect.Pointer {
			shared(t, path, a.Elem(), b.Elem())
		}
	case reflect.Slice:
		if a.Len() == 0 {
			t.Errorf("%s is empty in the example: set it", path)
			return
		}
		if a.Pointer() == b.Pointer() {
			t.Errorf("%s is shared by the clone", path)
		}
		for i := range a.Len() {
			shared(t, path+"[]", a.Index(i), b.Index(i))
		}
	case reflect.Struct:
		if a.Type() == reflect.TypeOf(time.Time{}) {
			return // a value; its location pointer is never written
		}
		for i := range a.NumField() {
			if a.Type().Field(i).IsExported() {
				shared(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
			}
		}
	}
}
