//! The AWS provider's tests, one test binary: against a local moto EC2
//! emulator (`aws_moto`, `aws_moto_lab_id`) and with the SDK's request
//! mocking (`aws_requests`). One binary rather than one per file, so
//! aws-sdk-ec2 with its test features is linked once for all of them.

mod aws_moto;
mod aws_moto_lab_id;
mod aws_requests;
mod common;
