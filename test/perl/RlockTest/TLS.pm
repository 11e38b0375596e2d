
=pod

=head1 NAME

RlockTest::TLS - certificates for rlock's TLS tests, made with the openssl
command: a CA, a server certificate for localhost and 127.0.0.1, a client
certificate, and a second CA that signed nothing of these; and on demand,
server certificates for other names, signed by the same CA

=head1 SYNOPSIS

  my $certs = RlockTest::TLS::certs();
  # $certs->{ca}, {server_crt}, {server_key}, {client_crt}, {client_key},
  # {other_ca}: file names

  # a server certificate of its own, signed by the same CA
  my $node = RlockTest::TLS::server_cert('node1',
      'DNS:rlock-cluster.test,IP:127.0.0.1');
  # $node->{crt}, $node->{key}: file names

=cut

package RlockTest::TLS;

use strict;
use warnings;

use File::Temp ();
use POSIX ();

my $made;

sub _openssl
{
	my (@args) = @_;
	my $pid = fork() // die "fork: $!";
	if ($pid == 0)
	{
		open(STDOUT, '>', '/dev/null');
		open(STDERR, '>', '/dev/null');
		exec('openssl', @args) or POSIX::_exit(1);
	}
	waitpid($pid, 0);
	$? == 0 or die "openssl @args failed\n";
}

# A key and a certificate signed by $ca (self-signed if undef), with the
# extensions in $ext (a string for -extfile).
sub _cert
{
	my ($dir, $name, $subject, $ca, $ext) = @_;
	my $key = "$dir/$name.key";
	my $crt = "$dir/$name.crt";
	if (!$ca)
	{
		_openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt',
			'ec_paramgen_curve:prime256v1', '-nodes', '-days', '30',
			'-subj', $subject, '-keyout', $key, '-out', $crt);
	}
	else
	{
		open(my $fh, '>', "$dir/$name.ext") or die "$dir/$name.ext: $!";
		print $fh $ext;
		close $fh;
		_openssl('req', '-newkey', 'ec', '-pkeyopt',
			'ec_paramgen_curve:prime256v1', '-nodes', '-subj', $subject,
			'-keyout', $key, '-out', "$dir/$name.csr");
		_openssl('x509', '-req', '-in', "$dir/$name.csr", '-CA', "$ca.crt",
			'-CAkey', "$ca.key", '-CAcreateserial', '-days', '30',
			'-extfile', "$dir/$name.ext", '-out', $crt);
	}
	chmod 0600, $key;
	return ($crt, $key);
}

# The certificates, made once per test script.
sub certs
{
	return $made if $made;
	my $dir = File::Temp::tempdir(CLEANUP => 1);
	my ($ca) = _cert($dir, 'ca', '/CN=rlock test CA');
	my ($other) = _cert($dir, 'other', '/CN=rlock other CA');
	my ($server_crt, $server_key) = _cert($dir, 'server', '/CN=localhost',
		"$dir/ca",
		"subjectAltName=DNS:localhost,IP:127.0.0.1\n"
		  . "extendedKeyUsage=serverAuth,clientAuth\n");
	my ($client_crt, $client_key) = _cert($dir, 'client', '/CN=rlock',
		"$dir/ca", "extendedKeyUsage=clientAuth\n");
	$made = {
		dir => $dir,
		ca => $ca,
		other_ca => $other,
		server_crt => $server_crt,
		server_key => $server_key,
		client_crt => $client_crt,
		client_key => $client_key,
	};
	return $made;
}

# A server certificate signed by the CA of certs(), for the
# subjectAltName $san (as openssl writes it: "DNS:a.test,IP:127.0.0.1");
# $name tells the files apart.  Returns { crt => file, key => file }.
sub server_cert
{
	my ($name, $san) = @_;
	my $certs = certs();
	my ($crt, $key) = _cert($certs->{dir}, "server-$name", "/CN=$name",
		"$certs->{dir}/ca",
		"subjectAltName=$san\n" . "extendedKeyUsage=serverAuth,clientAuth\n");
	return { crt => $crt, key => $key };
}

# Run the whole suite over TLS (make test sets this for its second round).
sub everywhere { return ($ENV{RLOCK_TEST_TLS} // '') eq '1' }

1;
