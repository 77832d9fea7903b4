module github.com/stormguard/stormguard/clients/go

go 1.19
