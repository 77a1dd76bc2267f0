// Package deploy holds the tests of what ships next to the binary: the manifests under deploy/
// (the kustomize base, one overlay per cluster whose kubelet root directory differs, the
// examples, the Helm chart's renders), the Dockerfile and .dockerignore, and the README's deploy
// commands. It has no code of its own. The tests check invariants — every hostPath is the value
// of the flag that uses it, the args and variables are flags the binary accepts (parsed by the
// plugin's own options package), profiles load as the binary loads them, the security settings
// are there, a service account token only where the plugin uses the API, the Dockerfile builds
// with `make build` from the build context Docker would send, with the version and revision
// stamped — rather than numbers and tags.
//
// The kustomizations are rendered by the tests themselves, the simple way (render in
// deploy_test.go): resources, components, namespace, images, JSON 6902 patches and ConfigMap
// generators, the only kustomize features deploy/ uses; a kustomization using anything else
// fails the test.
// Where kubectl is installed, TestDeploy_RenderMatchesKubectlKustomize checks that render agrees
// with `kubectl kustomize` on every kustomization (package chart compares the chart with the
// kustomizations as kustomize's Go API builds them).
//
// The Helm chart is checked through its renders in testdata/chart/<case>.yaml, which package
// chart writes with Helm's Go API (`cd e2e && go test ./chart -run TestChart_Testdata -update`),
// like the kustomizations. Each render carries the digest of the chart's files, so a chart
// changed since is a failure here, not a stale pass.
//
// The DRA manifests (deploy/components/dra, deploy/overlays/dra, the chart's DRA values) set or
// mount the defaults of the DRA driver's flags: -kubelet-api, -dra-driver-name,
// -kubelet-registry-dir, -kubelet-plugins-dir, read through options like every other flag
// (TestDeploy_DRADefaults checks the defaults the manifests assume).
//
// The tests need neither root nor a cluster (`cd e2e && go test ./deploy`; `make unit` runs
// them, e2e/run.sh leaves them out). They live in the e2e module, a test module, because they
// read the plugin's options package under cmd/, which no package of the product imports.
package deploy
