module kubevirt.io/virt-template-engine

go 1.24.0
