package podresources

import "errors"

// ErrListFailed means the kubelet's PodResources List did not answer (the
// socket is absent, or the kubelet is restarting). Nothing was changed.
var ErrListFailed = errors.New("list pod resources")
