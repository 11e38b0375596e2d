
=pod

=head1 NAME

RlockTest::Sentinel - a throw-away Redis Sentinel deployment on loopback
ports for rlock's tests: a primary, its replicas and three Sentinels;
failovers, killed and frozen servers, and writes lost in a failover

=cut

package RlockTest::Sentinel;

use strict;
use warnings;

use File::Temp ();
use POSIX ();
use RlockTest::Redis;
use RlockTest::Resp;

# Start the deployment; options: dir (for the servers' files and logs; a
# temporary one by default), replicas (2), sentinels (3), master_name
# ('main'), data_password and sentinel_password (none), down_after_ms
# (1000), failover_timeout_ms (5000).  Returns once every replica is in
# sync and every Sentinel knows the primary, the replicas and its peers.
sub start
{
	my ($class, %opt) = @_;
	my $self = bless {
		name => $opt{master_name} // 'main',
		data_pw => $opt{data_password},
		sentinel_pw => $opt{sentinel_password},
		down_after => $opt{down_after_ms} // 1000,
		failover_timeout => $opt{failover_timeout_ms} // 5000,
		dir => $opt{dir} // File::Temp::tempdir(CLEANUP => 1),
		nodes => [],
		sentinels => [],
	}, $class;
	my @auth = defined $self->{data_pw}
	  ? ('--requirepass', $self->{data_pw}, '--masterauth', $self->{data_pw})
	  : ();
	my $n_data = 0;
	my $data_dir = sub {
		my $d = "$self->{dir}/data" . $n_data++;
		mkdir $d;
		return $d;
	};
	my $primary = RlockTest::Redis->start(args => [@auth],
		password => $self->{data_pw}, dir => $data_dir->());
	push @{ $self->{nodes} }, $primary;
	for (1 .. ($opt{replicas} // 2))
	{
		push @{ $self->{nodes} },
		  RlockTest::Redis->start(
			args => [ @auth, '--replicaof', '127.0.0.1', $primary->port ],
			password => $self->{data_pw}, dir => $data_dir->());
	}
	for my $r (@{ $self->{nodes} }[ 1 .. $#{ $self->{nodes} } ])
	{
		RlockTest::wait_until(
			sub { ($r->cmd('INFO', 'replication') // '') =~ /master_link_status:up/ },
			20)
		  or die 'replica on port ' . $r->port . ' did not sync';
	}
	my $n = $opt{sentinels} // 3;
	$self->{quorum} = int($n / 2) + 1;
	for my $i (0 .. $n - 1)
	{
		my $port = RlockTest::free_port();
		my $conf = "$self->{dir}/sentinel$i.conf";
		open(my $fh, '>', $conf) or die "$conf: $!";
		print $fh join("\n",
			"port $port", 'bind 127.0.0.1', "dir $self->{dir}",
			(defined $self->{sentinel_pw} ? "requirepass $self->{sentinel_pw}" : ()),
			"sentinel monitor $self->{name} 127.0.0.1 " . $primary->port . " $self->{quorum}",
			(defined $self->{data_pw} ? "sentinel auth-pass $self->{name} $self->{data_pw}" : ()),
			"sentinel down-after-milliseconds $self->{name} $self->{down_after}",
			"sentinel failover-timeout $self->{name} $self->{failover_timeout}",
			"sentinel parallel-syncs $self->{name} 1", '');
		close $fh;
		push @{ $self->{sentinels} }, { port => $port, conf => $conf };
		$self->start_sentinel($i);
	}
	my $others = $n - 1;
	my $nrep = scalar(@{ $self->{nodes} }) - 1;
	for my $i (0 .. $n - 1)
	{
		RlockTest::wait_until(
			sub {
				my $s = eval { $self->sentinel_cmd($i, 'SENTINEL', 'SENTINELS', $self->{name}) };
				my $r = eval { $self->sentinel_cmd($i, 'SENTINEL', 'REPLICAS', $self->{name}) };
				ref $s eq 'ARRAY' && @$s == $others && ref $r eq 'ARRAY' && @$r == $nrep;
			},
			30)
		  or die "Sentinel $i did not learn its peers and the replicas";
	}
	return $self;
}

sub master_name { $_[0]{name} }
sub sentinel_ports { map { $_->{port} } @{ $_[0]{sentinels} } }
sub data_nodes { $_[0]{nodes} }

# rlock.nodes for the Sentinels, in order
sub nodes_setting
{
	return join(',', map { "127.0.0.1:$_" } $_[0]->sentinel_ports);
}

# Run a command on Sentinel $i (authenticated); dies if it is not up.
sub sentinel_cmd
{
	my ($self, $i, @args) = @_;
	my $conn = RlockTest::Resp->connect($self->{sentinels}[$i]{port});
	$conn->call('AUTH', $self->{sentinel_pw}) if defined $self->{sentinel_pw};
	return $conn->call(@args);
}

# The port a live Sentinel names as the primary, or undef.
sub _named_port
{
	my ($self, $i) = @_;
	my $a = eval {
		$self->sentinel_cmd($i, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', $self->{name});
	};
	return ref $a eq 'ARRAY' ? $a->[1] : undef;
}

sub _live { my ($self) = @_; return grep { $self->{sentinels}[$_]{pid} && !$self->{sentinels}[$_]{frozen} } 0 .. $#{ $self->{sentinels} } }

sub _node_by_port
{
	my ($self, $port) = @_;
	my ($node) = grep { $_->port == $port } @{ $self->{nodes} };
	return $node;
}

# The data node the Sentinels name as the primary now.
sub primary
{
	my ($self) = @_;
	for my $i ($self->_live)
	{
		my $port = $self->_named_port($i);
		return $self->_node_by_port($port) if defined $port;
	}
	die 'no Sentinel names a primary';
}

# The data nodes other than the primary.
sub replicas_now
{
	my ($self) = @_;
	my $p = $self->primary;
	return grep { $_ != $p } @{ $self->{nodes} };
}

sub start_sentinel
{
	my ($self, $i) = @_;
	my $s = $self->{sentinels}[$i];
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		open(STDOUT, '>>', "$self->{dir}/sentinel$i.log");
		open(STDERR, '>&', \*STDOUT);
		exec('redis-sentinel', $s->{conf}) or POSIX::_exit(1);
	}
	$s->{pid} = $pid;
	$s->{frozen} = 0;
	RlockTest::wait_until(sub { eval { $self->sentinel_cmd($i, 'PING'); 1 } }, 10)
	  or die "Sentinel $i did not start";
}

sub stop_sentinel
{
	my ($self, $i) = @_;
	my $s = $self->{sentinels}[$i];
	return unless $s->{pid};
	kill 'CONT', $s->{pid};
	kill 'TERM', $s->{pid};
	unless (RlockTest::wait_until(sub { waitpid($s->{pid}, POSIX::WNOHANG()) != 0 }, 5))
	{
		kill 'KILL', $s->{pid};
		waitpid($s->{pid}, 0);
	}
	delete $s->{pid};
}

# Freeze and thaw Sentinel $i (SIGSTOP / SIGCONT): it keeps its socket
# but answers nothing, and misses what the others decide meanwhile.
sub sentinel_freeze
{
	my ($self, $i) = @_;
	kill 'STOP', $self->{sentinels}[$i]{pid};
	$self->{sentinels}[$i]{frozen} = 1;
}

sub sentinel_thaw
{
	my ($self, $i) = @_;
	kill 'CONT', $self->{sentinels}[$i]{pid};
	$self->{sentinels}[$i]{frozen} = 0;
}

# Wait until every live Sentinel names a primary other than port $old,
# and that node says it is one; returns it.
sub wait_switch
{
	my ($self, $old, $timeout) = @_;
	my $new;
	RlockTest::wait_until(
		sub {
			my %named = map { ($self->_named_port($_) // 'none') => 1 } $self->_live;
			my @ports = keys %named;
			return 0 unless @ports == 1 && $ports[0] ne 'none' && $ports[0] != $old;
			$new = $self->_node_by_port($ports[0]);
			my $role = eval { $new->cmd('ROLE') };
			return ref $role eq 'ARRAY' && $role->[0] eq 'master';
		},
		$timeout // 30)
	  or die "the Sentinels did not switch away from port $old";
	return $new;
}

# SENTINEL FAILOVER; returns the new primary once every live Sentinel
# names it.  The old primary stays a primary until the Sentinels convert
# it (wait_converted).
sub failover
{
	my ($self, %opt) = @_;
	my $old = $self->primary;
	my ($i) = $self->_live;
	my $r = $self->sentinel_cmd($i, 'SENTINEL', 'FAILOVER', $self->{name});
	die "SENTINEL FAILOVER refused: $r->{error}" if ref $r eq 'HASH';
	return $self->wait_switch($old->port, $opt{timeout});
}

# Wait until data node $node says it is a replica.
sub wait_converted
{
	my ($self, $node, $timeout) = @_;
	return RlockTest::wait_until(
		sub {
			my $role = eval { $node->cmd('ROLE') };
			ref $role eq 'ARRAY' && $role->[0] eq 'slave';
		},
		$timeout // 30);
}

# Writes to the primary from now on reach no replica: the replicas are
# frozen and the primary's links to them closed (a write already in a
# replica's socket buffer would otherwise arrive when it is thawed).
sub lose_writes_setup
{
	my ($self) = @_;
	my $p = $self->primary;
	$self->{losing} = $p;
	my @replicas = grep { $_ != $p } @{ $self->{nodes} };
	$_->freeze for @replicas;
	$p->cmd('CLIENT', 'KILL', 'TYPE', 'replica');
	$self->{frozen_replicas} = \@replicas;
}

# Freeze the primary, thaw the replicas: the Sentinels promote one of
# them, which never saw the writes made since lose_writes_setup.  Then
# the old primary is thawed and converted (it drops those writes).
# Returns the new primary.
sub lose_writes_finish
{
	my ($self, %opt) = @_;
	my $old = $self->{losing};
	$old->freeze;
	$_->thaw for @{ $self->{frozen_replicas} };
	my $new = $self->wait_switch($old->port, $opt{timeout});
	$old->thaw;
	$self->wait_converted($old, $opt{timeout} // 30)
	  or die 'the old primary was not converted to a replica';
	delete $self->{losing};
	delete $self->{frozen_replicas};
	return $new;
}

sub stop
{
	my ($self) = @_;
	$self->stop_sentinel($_) for 0 .. $#{ $self->{sentinels} // [] };
	$_->stop for @{ $self->{nodes} // [] };
}

sub DESTROY
{
	my ($self) = @_;
	local $?;
	$self->stop;
}

1;
