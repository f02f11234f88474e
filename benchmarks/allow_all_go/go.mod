module dispatch-k8s/benchmarks/allow_all_go

go 1.26
