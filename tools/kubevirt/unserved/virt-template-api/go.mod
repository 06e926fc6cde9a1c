module kubevirt.io/virt-template-api

go 1.24.0

require k8s.io/apimachinery v0.34.2
