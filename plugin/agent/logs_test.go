package agent

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/unicore/virtual-gpu-device-plugin/store"
	"github.com/unicore/virtual-gpu-device-plugin/store/storetest"
)

// TestLogDamaged: damaged records quarantined at start, and the devices
// added again because of them, are logged as warnings naming them.
func TestLogDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	specs := []store.DeviceSpec{{ID: "fake-0", Index: 0}, {ID: "fake-1", Index: 1}}
	st := storetest.MustOpenPath(t, path, store.Options{})
	if _, err := st.Reconcile(specs); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.Damage(t, path, "devices", []byte("fake-1"), []byte("garbage"))
	storetest.Damage(t, path, "health_events", storetest.SeqKey(1), []byte(`{"seq":1}`))

	st = storetest.MustOpenPath(t, path, store.Options{})
	report, err := st.Reconcile(specs)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := logDamaged(zerolog.New(&buf), st, report); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		`"level":"warn","bucket":"devices","key":"fake-1","reason":"not a JSON object`,
		`"bucket":"health_events","key":"1","reason":"no time"`,
		`"devices":["fake-1"],"message":"devices whose stored record was damaged were added again as new and healthy`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s\n%s", want, out)
		}
	}
}
