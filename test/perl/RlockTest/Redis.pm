=pod

=head1 NAME

RlockTest::Redis - a throw-away redis-server on a loopback port for rlock's
tests: start, stop, kill, freeze, restart, and a connection to talk to it

=cut

package RlockTest::Redis;

use strict;
use warnings;

use File::Path ();
use File::Temp ();
use POSIX ();
use Time::HiRes qw(usleep);
use RlockTest::ACL;
use RlockTest::Resp;
use RlockTest::TLS;

# Start a redis-server on a free loopback port; options: port, args (list
# of extra command line arguments), password (what the tests' own
# connection authenticates with), tls (also listen for TLS on a port of
# its own, with the certificates of RlockTest::TLS: 1, or a hash with
# auth_clients => 'no' (the default), 'yes' or 'optional', and cert => a
# certificate of RlockTest::TLS::server_cert served instead of the shared
# one; tls_port: that port rather than a free one).  When the whole suite
# runs over TLS (RlockTest::TLS::everywhere), every server listens for
# TLS.  The plain port stays open for the tests' own client.
sub start
{
	my ($class, %opt) = @_;
	my $tls = $opt{tls} // (RlockTest::TLS::everywhere() ? 1 : undef);
	my $self = bless {
		port => $opt{port} // RlockTest::free_port(),
		args => $opt{args} // [],
		password => $opt{password},
		dir => $opt{dir} // File::Temp::tempdir(CLEANUP => 1),
	}, $class;
	if ($tls)
	{
		my $certs = RlockTest::TLS::certs();
		my $own = ref $tls ? $tls->{cert} : undef;
		$self->{certs} = $certs;
		$self->{tls_port} = $opt{tls_port} // RlockTest::free_port();
		push @{ $self->{args} },
		  '--tls-port', $self->{tls_port},
		  '--tls-cert-file', $own ? $own->{crt} : $certs->{server_crt},
		  '--tls-key-file', $own ? $own->{key} : $certs->{server_key},
		  '--tls-ca-cert-file', $certs->{ca},
		  '--tls-auth-clients',
		  (ref $tls ? $tls->{auth_clients} // 'no' : 'no');
	}
	my $acl = exists $opt{acl} ? $opt{acl}
	  : RlockTest::ACL::everywhere() ? 'data' : undef;
	push @{ $self->{args} }, RlockTest::ACL::server_args(
		ref $acl ? @$acl : (RlockTest::ACL::lines($acl))[ 0, 1 ])
	  if $acl;
	$self->_spawn;
	return $self;
}

# A replica of this server, started like any other (options as start's),
# once its link to this server is up; dies if it is not within 20 s.
sub start_replica
{
	my ($self, %opt) = @_;
	my $replica = RlockTest::Redis->start(%opt,
		args => [ @{ $opt{args} // [] }, '--replicaof', '127.0.0.1', $self->port ]);
	RlockTest::wait_until(
		sub { ($replica->cmd('INFO', 'replication') // '') =~ /master_link_status:up/ },
		20)
	  or die 'the replica on port ' . $replica->port . ' did not attach';
	return $replica;
}

sub port { $_[0]{port} }

# The TLS port, undef without TLS.
sub tls_port { $_[0]{tls_port} }

# The port rlock should use: the TLS one when there is one.
sub rlock_port { $_[0]{tls_port} // $_[0]{port} }

# The certificates of a server with TLS.
sub certs { $_[0]{certs} }
sub pid { $_[0]{pid} }

sub _spawn
{
	my ($self) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>>', "$self->{dir}/redis.log");
		open(STDERR, '>&', \*STDOUT);
		exec('redis-server', '--port', $self->{port}, '--bind', '127.0.0.1',
			'--save', '', '--appendonly', 'no', '--dir', $self->{dir},
			@{ $self->{args} })
		  or POSIX::_exit(1);
	}
	$self->{pid} = $pid;
	delete $self->{conn};
	# any answer will do: with a password, PING answers NOAUTH
	RlockTest::wait_until(sub { eval { $self->cmd('PING'); 1 } }, 10)
	  or die "redis-server on port $self->{port} did not start";
}

# Run one command on a connection kept for the purpose; returns the reply
# (see RlockTest::Resp::read_reply).
sub cmd
{
	my ($self, @args) = @_;
	unless ($self->{conn})
	{
		$self->{conn} = RlockTest::Resp->connect($self->{port});
		$self->{conn}->call('AUTH', $self->{password})
		  if defined $self->{password};
	}
	my $reply = eval { $self->{conn}->call(@args) };
	if ($@)
	{
		delete $self->{conn};
		die $@;
	}
	return $reply;
}

# The holds on lock $key, owner => count: its hash without the "mode"
# field that marks it for Redisson's read-write locks (acquire.lua).
sub holds
{
	my ($self, $key) = @_;
	my %h = @{ $self->cmd('HGETALL', $key) };
	delete $h{mode};
	return \%h;
}

# The owners holding lock $key, sorted.
sub owners { return [ sort keys %{ $_[0]->holds($_[1]) } ] }

# Their hold counts, in the order of owners().
sub counts
{
	my ($self, $key) = @_;
	my $h = $self->holds($key);
	return [ map { $h->{$_} } sort keys %$h ];
}

# How many clients are subscribed to the unlock channel of lock $key.
sub subscribers
{
	my ($self, $key) = @_;
	my $channel = 'redisson_lock__channel:'
	  . ($key =~ /\{/ ? $key : "{$key}");
	return $self->cmd('PUBSUB', 'NUMSUB', $channel)->[1];
}

# The id of the client connection named $name (CLIENT SETNAME), or undef;
# the newest one if an old connection of that name is still there.
sub client_id
{
	my ($self, $name) = @_;
	my $id;
	for my $line (split /\n/, $self->cmd('CLIENT', 'LIST'))
	{
		$id = $1 if $line =~ /^id=(\d+) .* name=\Q$name\E /
		  && (!defined $id || $1 > $id);
	}
	return $id;
}

# A connection that sees every command Redis runs (MONITOR); read it with
# RlockTest::Resp::drain.
sub monitor
{
	my ($self) = @_;
	my $conn = RlockTest::Resp->connect($self->{port});
	my $ok = $conn->call('MONITOR');
	die "MONITOR refused" unless defined $ok && $ok eq 'OK';
	return $conn;
}

# A new connection of its own (for SUBSCRIBE, or to keep a reply order).
sub connect
{
	my ($self) = @_;
	return RlockTest::Resp->connect($self->{port});
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid};
	delete $self->{conn};
	kill 'CONT', $self->{pid};
	kill 'TERM', $self->{pid};
	# a server busy in a script ignores SIGTERM: do not wait for ever
	unless (RlockTest::wait_until(
			sub { waitpid($self->{pid}, POSIX::WNOHANG()) != 0 }, 5))
	{
		kill 'KILL', $self->{pid};
		waitpid($self->{pid}, 0);
	}
	delete $self->{pid};
}

sub kill9
{
	my ($self) = @_;
	return unless $self->{pid};
	delete $self->{conn};
	kill 'KILL', $self->{pid};
	waitpid($self->{pid}, 0);
	delete $self->{pid};
}

# Start again on the same port.  A server started without persistence
# comes back empty; one started with it (--appendonly yes) comes back with
# what it kept, unless $opt{empty}: then its data files are removed first,
# as a server whose disk was lost would come back.
sub restart
{
	my ($self, %opt) = @_;
	$self->stop;
	if ($opt{empty})
	{
		File::Path::remove_tree("$self->{dir}/appendonlydir");
		unlink("$self->{dir}/dump.rdb", "$self->{dir}/appendonly.aof");
	}
	$self->_spawn;
}

# Freeze and thaw the server process (SIGSTOP / SIGCONT).
sub freeze { kill 'STOP', $_[0]{pid} }
sub thaw { kill 'CONT', $_[0]{pid} }

sub DESTROY
{
	my ($self) = @_;
	local $?;
	$self->stop;
}

1;
